"""A remote worker's run's calls to other agents (`RemoteCalls`): the same `AgentCalls` a replica's run gets,
made by the server over the worker endpoint `POST /workers/v1/tasks/{id}/calls`
(`api/endpoints/worker_calls.py`), with the worker's own credential, which reaches them only while it holds
the run's task. The worker's runner makes one per run (`RunSetup.calls`), so the run's roll-up wrapper
(`run_calls.RunCalls`) applies as on a replica.

A call the server refuses raises `CallError` with the server's text. A call that waits is asked again
(`get_task` with a wait) until the child ends or asks, or AGENT_CALL_WAIT_S passes. A call that starts or
answers a task is tried once (a retry could start a second child); the reads and a cancel are retried while
the server cannot answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from app.agents.calls import AgentInfo, CallError, ChildTask
from app.agents.calls_wire import agents_from_wire, child_from_wire, files_to_wire
from app.protocol.model import INTERRUPTED_STATES, Part, TaskState

from .remote import Server, ServerError

RETRY_S = 30.0
"""How long a read or a cancel is retried while the server cannot answer."""


class RemoteCalls:
    """`AgentCalls` of one run of the worker, bound to its task (module docstring)."""

    def __init__(self, server: Server, task_id: str, wait_s: float) -> None:
        self._server = server
        self.task_id = task_id
        self.wait_s = wait_s

    async def list_agents(self) -> Sequence[AgentInfo]:
        body = await self._call("list_agents", {}, retry=True)
        return agents_from_wire(body["agents"])

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask:
        args = {"role": role, "text": text, "files": files_to_wire(files), "wait": wait}
        return await self._waited(await self._child("send_to_agent", args, retry=False), wait)

    async def get_task(self, task_id: str) -> ChildTask:
        return await self._child("get_task", {"taskId": task_id}, retry=True)

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask:
        args = {"taskId": task_id, "text": text, "wait": wait}
        return await self._waited(await self._child("answer_task", args, retry=False), wait)

    async def cancel_task(self, task_id: str) -> ChildTask:
        return await self._child("cancel_task", {"taskId": task_id}, retry=True)

    async def _waited(self, child: ChildTask, wait: bool) -> ChildTask:
        """The child once it ends or asks, asked again while the server's wait ran out first."""
        if not wait or not child.task_id:
            return child
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while not _stopped(child) and loop.time() < deadline:
            child = await self._child("get_task", {"taskId": child.task_id, "wait": True}, retry=True)
        return child

    async def _child(self, op: str, args: dict[str, Any], *, retry: bool) -> ChildTask:
        return child_from_wire((await self._call(op, args, retry=retry))["child"])

    async def _call(self, op: str, args: dict[str, Any], *, retry: bool) -> dict[str, Any]:
        path = f"/workers/v1/tasks/{self.task_id}/calls"
        try:
            status, body = await self._server.call(
                "POST", path, {"op": op, "args": args}, give_up_s=RETRY_S if retry else 0
            )
        except TimeoutError as exc:
            raise CallError(
                f"The server did not answer the call ({exc}); a task it was to start may have started "
                "all the same"
            ) from None
        except ServerError as exc:
            raise CallError(str(exc)) from None
        if status != 200:
            error = body.get("error") if isinstance(body, dict) else None
            text = error.get("message") if isinstance(error, dict) else None
            raise CallError(text or f"The server refused the call (HTTP {status})")
        return body


def _stopped(child: ChildTask) -> bool:
    try:
        state = TaskState(child.state)
    except ValueError:
        return True
    return state.terminal or state in INTERRUPTED_STATES
