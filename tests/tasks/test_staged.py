"""Staged creation (`TaskService._accept`, `LiveTasks.stage`/`born`): a blocking send to a pure agent
commits its new task with the run's first step; nobody sees the task before that commit; a run slow to take
a step has its task committed alone; a copy that loses the race is dropped, its run with it."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from app.agents.sdk import TaskContext
from app.protocol.errors import TaskNotFoundError
from app.protocol.model import SendConfig, Task, TaskState
from app.protocol.usage import Usage
from app.store.models import ArtifactRow, TaskRow
from app.tasks import service as service_module
from tests.support.inproc import OWNER, WAIT_S, running, send, texts, user


async def _echo(task: TaskContext) -> None:
    await task.say(f"echo: {task.text}")


async def _stored(c, task_id: str):
    """The task as the database has it (not the live copy)."""
    return await c.tasks.parts.repo.get_task(task_id, owner=OWNER)


@pytest.mark.parametrize("pure", [True, False])
async def test_a_pure_agent_that_answers_at_once_costs_one_commit(tmp_path, pure):
    async with running(tmp_path, _echo, pure=pure) as c:
        await send(c, "warm up")
        commits, created = c.writer.commits, c.tasks.created_total
        task = await send(c, "hello")
        assert task.status.state is TaskState.COMPLETED
        assert texts(task) == ["echo: hello"]
        assert c.writer.commits - commits == (1 if pure else 2)
        assert c.tasks.created_total - created == 1
        stored = await _stored(c, task.id)
        assert stored is not None and stored.task.status.state is TaskState.COMPLETED
        assert [t.state for t in stored.task.transitions] == [
            TaskState.SUBMITTED,
            TaskState.WORKING,
            TaskState.COMPLETED,
        ]
        events = await c.tasks.parts.repo.events_after(task.id, task.context_id, 0, owner=OWNER)
        assert [e.seq for e in events] == list(range(1, stored.last_seq + 1))
        assert events[0].event.status.state is TaskState.SUBMITTED
        assert c.runner.running == 0


class _Held:
    """An agent whose run says its task's id, then takes its one step (`say`) only once `go` is set."""

    def __init__(self, text: str) -> None:
        self.started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.go = asyncio.Event()
        self.text = text

    async def script(self, task: TaskContext) -> None:
        self.started.set_result(task.id)
        await self.go.wait()
        await task.say(self.text)


async def test_a_staged_task_is_seen_by_nobody_until_its_first_step_commits(tmp_path, monkeypatch):
    monkeypatch.setattr(service_module, "STAGED_S", WAIT_S)
    held = _Held("done")
    async with running(tmp_path, held.script, pure=True) as c:
        sending = asyncio.create_task(send(c, "wait"))
        task_id = await asyncio.wait_for(held.started, WAIT_S)
        assert await _stored(c, task_id) is None
        with pytest.raises(TaskNotFoundError):
            await c.service.get(OWNER, task_id)
        with pytest.raises(TaskNotFoundError):
            await c.service.cancel(OWNER, task_id)
        with pytest.raises(TaskNotFoundError):
            await c.service.resubscribe(OWNER, task_id)
        assert (await c.service.list(OWNER)).tasks == []
        held.go.set()
        task = await asyncio.wait_for(sending, WAIT_S)
        assert task.id == task_id and texts(task) == ["done"]
        assert (await c.service.get(OWNER, task_id)).status.state is TaskState.COMPLETED


async def test_a_pure_agent_slow_to_take_a_step_has_its_task_committed_alone_first(tmp_path):
    held = _Held("late")
    async with running(tmp_path, held.script, pure=True) as c:
        sending = asyncio.create_task(send(c, "slow"))
        task_id = await asyncio.wait_for(held.started, WAIT_S)
        async with asyncio.timeout(WAIT_S):
            while (stored := await _stored(c, task_id)) is None:
                await asyncio.sleep(0.01)
        assert stored.task.status.state is TaskState.SUBMITTED
        assert (await c.service.get(OWNER, task_id)).status.state is TaskState.SUBMITTED
        held.go.set()
        task = await asyncio.wait_for(sending, WAIT_S)
        assert task.status.state is TaskState.COMPLETED and texts(task) == ["late"]
        events = await c.tasks.parts.repo.events_after(task_id, task.context_id, 0, owner=OWNER)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_copies_with_one_idempotency_key_make_one_task_and_the_loser_runs_nothing_more(tmp_path):
    runs: list[str] = []

    async def script(task: TaskContext) -> None:
        runs.append(task.id)
        await task.say(f"echo: {task.text}")

    async with running(tmp_path, script, pure=True) as c:
        message = user("once")

        async def copy() -> Task:
            sent = user("once")
            sent.message_id = message.message_id
            made = await c.service.send(OWNER, sent, SendConfig(blocking=True), key="key-1")
            assert isinstance(made, Task)
            return made

        made = await asyncio.gather(*(copy() for _ in range(4)))
        assert len({t.id for t in made}) == 1, "every copy answers with the one task stored"
        assert all(t.status.state is TaskState.COMPLETED for t in made)
        page = await c.service.list(OWNER)
        assert [t.id for t in page.tasks] == [made[0].id]
        assert made[0].id in runs
        async with asyncio.timeout(WAIT_S):
            while c.runner.running:
                await asyncio.sleep(0.01)
        assert c.tasks.held == 0, "no dropped copy stays held"
        again = await send(c, "after")
        assert again.status.state is TaskState.COMPLETED


async def test_a_task_that_ends_in_its_first_step_is_stored_folded_with_its_usage_and_no_retry_key(tmp_path):
    async def script(task: TaskContext) -> None:
        for word in ("one ", "two ", "three"):
            await task.say(word)
        await task.complete(usage=Usage.of("m", input_tokens=5, output_tokens=7))

    async with running(tmp_path, script, pure=True) as c:
        commits = c.writer.commits
        task = await send(c, "count")
        assert c.writer.commits - commits == 1
        stored = await _stored(c, task.id)
        assert stored is not None
        assert texts(stored.task) == ["one two three"]
        assert stored.task.metadata is not None and stored.task.metadata["usage"]["inputTokens"] == 5
        async with c.engine.connect() as conn:
            rows = (await conn.execute(select(ArtifactRow.seq).where(ArtifactRow.task_id == task.id))).all()
            retry = (await conn.execute(select(TaskRow.retry_key).where(TaskRow.id == task.id))).scalar_one()
        assert len(rows) == 1, "one folded row per artifact, as a finished task's are"
        assert retry is None, "a finished task's copy is a new message"
