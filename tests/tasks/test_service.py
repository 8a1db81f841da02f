"""The task service in process (MemoryBus, SQLite): send, answers, cancel, follow and resubscribe, get,
list, and the push config calls, driven by tiny agents."""

from __future__ import annotations

import asyncio

import pytest

from app.agents.sdk import TaskContext
from app.protocol.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import PushConfig, Role, TaskState
from app.tasks.step import Snapshot
from tests.support.inproc import OWNER, WAIT_S, running, send, status_text, texts, user


async def test_send_runs_the_agent_to_completion(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.say(f"echo: {task.text}")

    async with running(tmp_path, script) as c:
        task = await send(c, "hello")
        assert task.status.state is TaskState.COMPLETED
        assert texts(task) == ["echo: hello"]
        assert [m.role for m in task.history] == [Role.USER]
        assert [t.state for t in task.transitions] == [
            TaskState.SUBMITTED,
            TaskState.WORKING,
            TaskState.COMPLETED,
        ]
        with pytest.raises(TaskNotFoundError):
            await c.service.get("mallory", task.id)


async def test_input_required_then_the_answer_continues_the_run(tmp_path):
    async def script(task: TaskContext) -> None:
        answer = await task.ask("Which name?")
        await task.complete(f"Hello, {''.join(p.text or '' for p in answer.parts)}")

    async with running(tmp_path, script) as c:
        asked = await send(c, "greet someone")
        assert asked.status.state is TaskState.INPUT_REQUIRED
        assert status_text(asked) == "Which name?"
        done = await send(c, "Ada", task_id=asked.id, context_id=asked.context_id)
        assert done.id == asked.id
        assert done.status.state is TaskState.COMPLETED
        assert status_text(done) == "Hello, Ada"
        history = [("".join(p.text or "" for p in m.parts), m.role) for m in done.history]
        assert history == [
            ("greet someone", Role.USER),
            ("Which name?", Role.AGENT),
            ("Ada", Role.USER),
            ("Hello, Ada", Role.AGENT),
        ]
        with pytest.raises(Exception, match="finished task takes no more messages"):
            await send(c, "again", task_id=done.id)


async def test_cancel_stops_a_running_agent(tmp_path):
    started = asyncio.Event()
    hooks: list[str] = []

    async def script(task: TaskContext) -> None:
        async def stopped() -> None:
            hooks.append(task.id)

        task.on_cancel(stopped)
        await task.working("busy")
        started.set()
        await asyncio.Event().wait()

    async with running(tmp_path, script) as c:
        task = await send(c, "work", blocking=False)
        await asyncio.wait_for(started.wait(), WAIT_S)
        canceled = await c.service.cancel(OWNER, task.id)
        assert canceled.status.state is TaskState.CANCELED
        assert hooks == [task.id], "the agent's cancel hook ran"
        assert c.runner.running == 0
        assert (await c.service.get(OWNER, task.id)).status.state is TaskState.CANCELED
        with pytest.raises(TaskNotCancelableError):
            await c.service.cancel(OWNER, task.id)


async def test_stream_and_resubscribe_from_a_cursor_see_every_event_in_order(tmp_path):
    go = asyncio.Event()

    async def script(task: TaskContext) -> None:
        await go.wait()
        for word in ("one", "two", "three"):
            await task.say(word)
        await task.complete()

    async with running(tmp_path, script) as c:
        items = []
        stream = await c.service.stream(OWNER, user("count"))
        async for item in stream:
            items.append(item)
            if len(items) == 1:
                go.set()
        assert isinstance(items[0], Snapshot)
        records = items[1:]
        assert all(isinstance(r, EventRecord) for r in records)
        seqs = [r.seq for r in records]
        assert seqs == list(range(items[0].seq + 1, items[0].seq + 1 + len(records)))
        last = records[-1].event
        assert isinstance(last, StatusUpdate) and last.status.state is TaskState.COMPLETED
        task_id = items[0].task.id

        cursor = records[1].seq
        replay = [r async for r in await c.service.resubscribe(OWNER, task_id, after=cursor)]
        assert [r.seq for r in replay] == [r.seq for r in records if r.seq > cursor]
        assert [type(r.event) for r in replay] == [type(r.event) for r in records if r.seq > cursor]
        task = await c.service.get(OWNER, task_id)
        assert texts(task) == ["onetwothree"]
        with pytest.raises(TaskNotFoundError):
            await c.service.resubscribe("mallory", task_id)


async def test_get_returns_the_last_history_length_messages(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.ask("first question")
        await task.ask("second question")

    async with running(tmp_path, script, max_history_length=3) as c:
        task = await send(c, "start")
        task = await send(c, "answer one", task_id=task.id)
        assert task.status.state is TaskState.INPUT_REQUIRED
        full = await c.service.get(OWNER, task.id, history_length=100)
        assert len(full.history) == 3, "the server's cap (MAX_HISTORY_LENGTH) bounds every read"
        assert ["".join(p.text or "" for p in m.parts) for m in full.history] == [
            "first question",
            "answer one",
            "second question",
        ]
        one = await c.service.get(OWNER, task.id, history_length=1)
        assert [m.role for m in one.history] == [Role.AGENT]
        assert (await c.service.get(OWNER, task.id, history_length=0)).history == []


async def test_list_pages_through_the_callers_tasks(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.say("ok")

    async with running(tmp_path, script) as c:
        made = [(await send(c, f"task {i}")).id for i in range(5)]
        seen: list[str] = []
        token = None
        sizes = []
        while True:
            page = await c.service.list(OWNER, page_size=2, page_token=token)
            assert page.total == 5
            sizes.append(len(page.tasks))
            seen.extend(t.id for t in page.tasks)
            token = page.next_token
            if not token:
                break
        assert sizes == [2, 2, 1]
        assert seen == list(reversed(made)), "newest status first, each task once"
        assert (await c.service.list("bob")).total == 0
        with pytest.raises(InvalidParamsError):
            await c.service.list(OWNER, page_token="not-a-token")


async def test_push_config_set_get_list_delete(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.ask("wait")

    async with running(tmp_path, script) as c:
        task = await send(c, "hooks")
        ids = []
        for i in range(3):
            stored = await c.service.set_push_config(
                OWNER, task.id, PushConfig(url=f"http://127.0.0.1:9/hook{i}", id=f"cfg{i}", token=f"t{i}")
            )
            ids.append(stored.id)
        assert ids == ["cfg0", "cfg1", "cfg2"]
        got = await c.service.get_push_config(OWNER, task.id, "cfg1")
        assert (got.url, got.token) == ("http://127.0.0.1:9/hook1", "t1")
        first, token = await c.service.list_push_configs(OWNER, task.id, page_size=2)
        rest, end = await c.service.list_push_configs(OWNER, task.id, page_size=2, page_token=token)
        assert [p.id for p in first + rest] == ids and token and not end
        await c.service.delete_push_config(OWNER, task.id, "cfg1")
        await c.service.delete_push_config(OWNER, task.id, "cfg1")  # a second delete is a no-op
        left, _ = await c.service.list_push_configs(OWNER, task.id)
        assert [p.id for p in left] == ["cfg0", "cfg2"]
        with pytest.raises(TaskNotFoundError):
            await c.service.get_push_config(OWNER, task.id, "cfg1")
        with pytest.raises(InvalidParamsError, match="refused"):
            await c.service.set_push_config(OWNER, task.id, PushConfig(url="http://10.0.0.1/hook"))
        with pytest.raises(TaskNotFoundError):
            await c.service.list_push_configs("mallory", task.id)
