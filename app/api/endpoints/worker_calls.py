"""A remote worker's run calling other agents: `POST /workers/v1/tasks/{id}/calls` `{role, instance, op,
args}`, with `op` one of `list_agents`, `send_to_agent` `{role, text, files, wait}`, `get_task` `{taskId,
wait}`, `answer_task` `{taskId, text, wait}`, `cancel_task` `{taskId}` → `{agents: [...]}` or `{child:
{...}}` (`agents/calls_wire.py`). The worker's `RemoteCalls` (`runner/remote_calls.py`) makes them.

The server makes the parent's calls as it does a replica's run's (`CallsFactory.for_parent`), as the task's
owner. The worker credential reaches them only while this worker instance holds the lease of `{id}` and the
task runs: for any other task, or once the run has ended, 409 `not_held`; the worker never holds a key of the
owner. A refused call (unknown role, depth, loop, not a child of this task) is 422 `refused` with the text
the agent is shown. A call that waits waits at most WORKER_CALL_HOLD_S here (below proxies' read timeouts):
the worker asks again with `get_task` `{wait: true}` until the child ends or asks.
"""

from __future__ import annotations

import binascii
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.agents.calls import CallError, ChildTask, child_task
from app.agents.calls_wire import agents_to_wire, child_to_wire
from app.protocol.model import INTERRUPTED_STATES, Part, TaskState
from app.runner.calls import CallsFactory, LocalCalls

from ..deps import components
from .workers import _answers, _Ask, _error, _json, _open, _Refused

router = APIRouter(prefix="/workers/v1")


class _Call(_Ask):
    op: Literal["list_agents", "send_to_agent", "get_task", "answer_task", "cancel_task"]
    args: dict[str, Any] = Field(default_factory=dict)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Send(_Args):
    role: str = Field(min_length=1, max_length=100)
    text: str = ""
    files: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    wait: bool = True


class _Child(_Args):
    task_id: str = Field(alias="taskId", min_length=1, max_length=200)
    wait: bool = False


class _Answer(_Child):
    text: str
    wait: bool = True


class _Cancel(_Args):
    task_id: str = Field(alias="taskId", min_length=1, max_length=200)


@router.post("/tasks/{task_id}/calls")
@_answers
async def calls(task_id: str, request: Request) -> Response:
    ask, desk, holder = await _open(request, _Call)
    factory = components(request).calls
    if factory is None:
        return _error(404, "no_calls", "This server makes no calls of agents to agents")
    running = await desk.running(holder, task_id)
    if running is None:
        return _error(
            409,
            "not_held",
            f"Task {task_id} is not running at this worker: a run calls other agents only while its "
            "worker holds its task",
        )
    owner, task = running
    bounded = CallsFactory(
        factory.services,
        factory.agents,
        factory.live,
        factory.tree,
        depth_limit=factory.depth_limit,
        wait_s=min(factory.wait_s, factory.hold_s),
        hold_s=factory.hold_s,
        day_budget=factory.day_budget,
    )
    parent = bounded.for_parent(owner, task_id, ask.role, task.metadata)
    try:
        return _json(await _make(parent, bounded, ask))
    except CallError as exc:
        return _error(422, "refused", str(exc))


async def _make(parent: LocalCalls, f: CallsFactory, ask: _Call) -> dict[str, Any]:
    """The call's answer (`{agents}` or `{child}`); `_Refused` (400) for arguments that do not parse."""
    if ask.op == "list_agents":
        return {"agents": agents_to_wire(await parent.list_agents())}
    if ask.op == "send_to_agent":
        send = _args(_Send, ask.args)
        try:
            files = [Part.from_store(p) for p in send.files]
        except (binascii.Error, ValueError, TypeError) as exc:
            raise _Refused(_error(400, "invalid", f"Invalid files: {exc}")) from None
        child = await parent.send_to_agent(send.role, send.text, files, send.wait)
    elif ask.op == "get_task":
        get = _args(_Child, ask.args)
        child = await parent.get_task(get.task_id)
        if get.wait and not _stopped(child):
            child = await _waited(parent, f, child)
    elif ask.op == "answer_task":
        answer = _args(_Answer, ask.args)
        child = await parent.answer_task(answer.task_id, answer.text, answer.wait)
    else:
        child = await parent.cancel_task(_args(_Cancel, ask.args).task_id)
    return {"child": child_to_wire(child)}


M = TypeVar("M", bound=_Args)


def _args(model: type[M], args: dict[str, Any]) -> M:
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "args"
        raise _Refused(_error(400, "invalid", f"Invalid args: {where}: {first['msg']}")) from None


def _stopped(child: ChildTask) -> bool:
    """The child ended or asks: a wait for it is over."""
    try:
        state = TaskState(child.state)
    except ValueError:
        return False
    return state.terminal or state in INTERRUPTED_STATES


async def _waited(parent: LocalCalls, f: CallsFactory, child: ChildTask) -> ChildTask:
    """The child (one of the parent's, `get_task` said so) once it ends or asks, or as it stands after the
    factory's wait."""
    service = f.services(child.role)
    if service is None:
        return child
    return child_task(await service.wait(parent.owner, child.task_id, f.wait_s), child.role)
