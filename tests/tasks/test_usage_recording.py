"""Usage reports recorded by the task service in process (MemoryBus, SQLite): each report is a `task_usage`
row per model written with the event carrying it, the task's metadata holds the sum, what is not a report is
stored as the event it came in but not counted, and the replica's counters add it up for /metrics."""

from __future__ import annotations

from sqlalchemy import select

from app.agents.sdk import TaskContext, Usage
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import SendConfig, TaskState
from app.protocol.usage import USAGE_KEY, ModelUsage
from app.store.models import EventRow, TaskRow, TaskUsageRow
from tests.support.inproc import OWNER, running, send, until, user


async def test_each_report_is_a_row_per_model_and_the_task_holds_the_sum(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.tool_call("Read", {"path": "a"})
        two_models = Usage((ModelUsage("a", 10, 5, 1, 0, 0.01), ModelUsage("b", 3, 1)), turns=2)
        answer = await task.ask("go on?", usage=two_models)
        await task.complete(f"ok {answer.text()}", usage=Usage.of("a", input_tokens=7, cost_usd=0.002))

    async with running(tmp_path, script) as c:
        task = await send(c, "hi")
        assert task.status.state is TaskState.INPUT_REQUIRED
        assert task.metadata is not None and task.metadata[USAGE_KEY]["reports"] == 1
        await c.service.send(
            OWNER, user("yes", task_id=task.id, context_id=task.context_id), SendConfig(blocking=False)
        )
        task = await until(c, task.id, TaskState.COMPLETED)
        usage = task.metadata[USAGE_KEY]  # type: ignore[index]
        assert (usage["reports"], usage["inputTokens"], usage["outputTokens"], usage["cacheReadTokens"]) == (
            2,
            20,
            6,
            1,
        )
        assert usage["costUsd"] == 0.012 and usage["turns"] == 2 and usage["toolCalls"] == 1
        assert usage["models"]["b"]["costUsd"] is None
        async with c.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(
                        TaskUsageRow.seq,
                        TaskUsageRow.model,
                        TaskUsageRow.input_tokens,
                        TaskUsageRow.tool_calls,
                        TaskUsageRow.reports,
                        TaskUsageRow.owner,
                        TaskUsageRow.role,
                        TaskUsageRow.context_id,
                    ).order_by(TaskUsageRow.seq, TaskUsageRow.model)
                )
            ).all()
            kinds = dict((await conn.execute(select(EventRow.seq, EventRow.kind))).all())
            stored = (await conn.execute(select(TaskRow.metadata_).where(TaskRow.id == task.id))).scalar()
        ask_seq, done_seq = rows[0].seq, rows[-1].seq
        assert [(r.seq, r.model, r.input_tokens, r.tool_calls, r.reports) for r in rows] == [
            (ask_seq, "a", 10, 1, 1),
            (ask_seq, "b", 3, 0, 0),
            (done_seq, "a", 7, 0, 1),
        ], "the run's own figures on a report's first row only"
        assert {(r.owner, r.role, r.context_id) for r in rows} == {(OWNER, "default", task.context_id)}
        assert kinds[ask_seq] == kinds[done_seq] == "status"
        assert stored == task.metadata, "the sum is in tasks.metadata"
        assert c.tasks.tokens_total[("a", "input")] == 17 and c.tasks.tokens_total[("b", "output")] == 1
        assert round(c.tasks.cost_total["a"], 6) == 0.012


async def test_a_stream_sees_each_report_on_its_status_event(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.usage(Usage.of("m", input_tokens=1))
        await task.complete(usage=Usage.of("m", output_tokens=2))

    async with running(tmp_path, script) as c:
        reports = []
        async for item in await c.service.stream(OWNER, user("hi")):
            if isinstance(item, EventRecord) and isinstance(item.event, StatusUpdate):
                if (item.event.metadata or {}).get(USAGE_KEY):
                    reports.append(Usage.from_wire(item.event.metadata[USAGE_KEY]).tokens("output"))  # type: ignore[index]
        assert reports == [0, 2]


async def test_what_is_not_a_report_is_not_counted(tmp_path):
    """A status event whose `usage` is not a report (a remote worker's, say) is stored as it came and
    counted nowhere."""

    async def script(task: TaskContext) -> None:
        bad = task._status(TaskState.WORKING, "progress")
        bad.metadata = {USAGE_KEY: {"models": [{"model": "m", "inputTokens": -5}]}}
        await task._send([bad])
        await task.complete()

    async with running(tmp_path, script) as c:
        task = await send(c, "hi")
        assert task.status.state is TaskState.COMPLETED
        assert not (task.metadata or {}).get(USAGE_KEY)
        async with c.engine.connect() as conn:
            assert (await conn.execute(select(TaskUsageRow.model))).all() == []


async def test_the_runs_session_is_kept_in_the_tasks_metadata_beside_its_usage(tmp_path):
    """`TaskContext.session` lands in the task's `metadata.session` (stored, not only in memory), the last
    one reported wins, only short strings are kept, and it is never an artifact."""

    async def script(task: TaskContext) -> None:
        await task.session(model="m-1", sessionId="s-1")
        await task.usage(Usage.of("m-1", input_tokens=4))
        await task.session(model="m-2", sessionId="s-2", note="x" * 300)
        await task.working(parts=[], usage=None)
        bogus = StatusUpdate(task.id, task.context_id, task._status(TaskState.WORKING, None).status)
        bogus.metadata = {"session": "not an object"}
        await task._send([bogus])
        await task.complete("done")

    async with running(tmp_path, script) as c:
        task = await send(c, "hi")
        task = await until(c, task.id, TaskState.COMPLETED)
        assert task.metadata is not None
        assert task.metadata["session"] == {"model": "m-2", "sessionId": "s-2"}
        assert task.metadata[USAGE_KEY]["inputTokens"] == 4
        assert task.artifacts == []
        async with c.engine.connect() as conn:
            stored = (await conn.execute(select(TaskRow.metadata_).where(TaskRow.id == task.id))).scalar()
        assert stored["session"] == {"model": "m-2", "sessionId": "s-2"}
