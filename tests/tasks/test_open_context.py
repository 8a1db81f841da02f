"""One open task per context for an agent with effects (docs/protocol.md "One open task per context").

A CLI works in its context's one workspace and resumes the context's one session: two tasks of a context
must not run at once. A new task in a context whose other task of such an agent is still open (submitted,
working) is refused with -32602 naming that task; nothing is stored. A copy of the
message that started the open task is that task (a retry, not a second task). A pure agent's tasks may
share a context and run side by side, as the protocol allows. On both databases: the rule is a partial
unique index, and each names its violation its own way. A message naming only the context (no taskId)
answers the context's one task waiting for input; several waiting are listed, never guessed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from app.agents.sdk import TaskContext
from app.protocol.errors import ContextBusyError, InvalidParamsError
from app.protocol.model import SendConfig, Task, TaskState
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.inproc import OWNER, running, send, until, user

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


class Gate:
    """A run that starts, asks when told to (`ask:` in its text; with `hold_asks`, only once `asks` is set),
    and finishes when the test says."""

    def __init__(self, hold_asks: bool = False) -> None:
        self.started = 0
        self.finish = asyncio.Event()
        self.asks = asyncio.Event()
        if not hold_asks:
            self.asks.set()

    async def __call__(self, task: TaskContext) -> None:
        self.started += 1
        await task.working()
        if "ask:" in task.message.text():
            await self.asks.wait()
            await task.ask("Which one?")
        await self.finish.wait()
        await task.complete("done")


async def _database(backend: str, tmp_path) -> dict[str, str]:
    if backend == "sqlite":
        return {}
    return {"database_url": await migrated_database_url(backend, tmp_path)}


async def test_a_second_open_task_in_the_context_is_refused_and_nothing_is_stored(backend, tmp_path):
    gate = Gate()
    async with running(tmp_path, gate, agent_timeout_s=600.0, **await _database(backend, tmp_path)) as c:
        first = await send(c, "work", blocking=False)
        await until(c, first.id, TaskState.WORKING)

        with pytest.raises(ContextBusyError) as refused:
            await send(c, "more", blocking=False, context_id=first.context_id)
        assert refused.value.code == -32602
        assert refused.value.data == {"contextId": first.context_id, "taskId": first.id, "state": "working"}
        assert first.id in refused.value.message
        page = await c.service.list(OWNER, context_id=first.context_id)
        assert [t.id for t in page.tasks] == [first.id], "the refused task was stored"
        assert gate.started == 1

        elsewhere = await send(c, "other", blocking=False)  # another context is not held up
        await until(c, elsewhere.id, TaskState.WORKING)

        gate.finish.set()
        await until(c, first.id, TaskState.COMPLETED)
        after = await send(c, "next", context_id=first.context_id)
        assert after.status.state is TaskState.COMPLETED and after.context_id == first.context_id


async def test_a_message_naming_only_the_context_answers_its_task_waiting_for_input(backend, tmp_path):
    """The context's open task waits for input: a message with its contextId and no taskId is the answer
    (as documents send it), not a second task."""
    gate = Gate()
    async with running(tmp_path, gate, agent_timeout_s=600.0, **await _database(backend, tmp_path)) as c:
        first = await send(c, "ask:", blocking=False)
        await until(c, first.id, TaskState.INPUT_REQUIRED)
        answered = await send(c, "this one", blocking=False, context_id=first.context_id)
        assert answered.id == first.id
        gate.finish.set()
        done = await until(c, first.id, TaskState.COMPLETED)
        assert "this one" in [m.text() for m in done.history]
        page = await c.service.list(OWNER, context_id=first.context_id)
        assert [t.id for t in page.tasks] == [first.id]


async def test_several_tasks_waiting_in_a_context_are_listed_not_guessed(backend, tmp_path):
    """A pure agent's two tasks of one context both wait for input: a message naming only the context is
    -32602 listing both, and nothing is stored; each answered by its taskId goes on."""
    gate = Gate(hold_asks=True)
    db = await _database(backend, tmp_path)
    async with running(tmp_path, gate, pure=True, agent_timeout_s=600.0, **db) as c:
        # Both start before either asks: once one waits, a message naming only the context answers it.
        first = await send(c, "ask:", blocking=False)
        await until(c, first.id, TaskState.WORKING)
        second = await send(c, "ask:", blocking=False, context_id=first.context_id)
        assert second.id != first.id
        await until(c, second.id, TaskState.WORKING)
        gate.asks.set()
        for task in (first, second):
            await until(c, task.id, TaskState.INPUT_REQUIRED)
        with pytest.raises(InvalidParamsError) as refused:
            await send(c, "yes", blocking=False, context_id=first.context_id)
        assert refused.value.code == -32602
        assert first.id in refused.value.message and second.id in refused.value.message
        assert refused.value.data["contextId"] == first.context_id
        assert set(refused.value.data["taskIds"].split(",")) == {first.id, second.id}
        page = await c.service.list(OWNER, context_id=first.context_id)
        assert {t.id for t in page.tasks} == {first.id, second.id}, "the refused message was stored"
        assert all(t.status.state is TaskState.INPUT_REQUIRED for t in page.tasks)
        gate.finish.set()
        for task in (first, second):
            await send(c, "yes", blocking=False, task_id=task.id)
            await until(c, task.id, TaskState.COMPLETED)


async def test_a_copy_of_the_first_message_is_its_task_not_a_refusal(backend, tmp_path):
    gate = Gate()
    async with running(tmp_path, gate, agent_timeout_s=600.0, **await _database(backend, tmp_path)) as c:
        message = user("work", context_id="ctx-copy")
        first = await c.service.send(OWNER, replace(message), SendConfig(blocking=False))
        assert isinstance(first, Task)
        await until(c, first.id, TaskState.WORKING)
        again = await c.service.send(OWNER, replace(message), SendConfig(blocking=False))
        assert isinstance(again, Task) and again.id == first.id
        assert gate.started == 1
        gate.finish.set()
        await until(c, first.id, TaskState.COMPLETED)


async def test_a_pure_agents_tasks_share_a_context_and_run_side_by_side(backend, tmp_path):
    gate = Gate()
    db = await _database(backend, tmp_path)
    async with running(tmp_path, gate, pure=True, agent_timeout_s=600.0, **db) as c:
        first = await send(c, "work", blocking=False)
        second = await send(c, "more", blocking=False, context_id=first.context_id)
        await until(c, first.id, TaskState.WORKING)
        await until(c, second.id, TaskState.WORKING)
        assert gate.started == 2
        gate.finish.set()
        for task in (first, second):
            await until(c, task.id, TaskState.COMPLETED)
