"""Traces in process (SQLite, MemoryBus, an in-memory exporter): the request's traceparent is kept with the
task it creates, every turn's agent run continues it, commit batches and bus publishes hang off the spans
that caused them; with tracing off nothing is kept and nothing is made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text

from app.agents.sdk import TaskContext
from app.protocol.model import SendConfig, Task, TaskState
from app.telemetry import traces
from tests.support.inproc import OWNER, running, send, user


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traces.enable(provider)
    try:
        yield exporter
    finally:
        traces.disable()
        provider.shutdown()


async def stored_traceparent(c, task_id: str) -> str | None:
    async with c.engine.connect() as conn:
        return (
            await conn.execute(text("SELECT traceparent FROM tasks WHERE id = :id"), {"id": task_id})
        ).scalar()


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_the_run_continues_the_trace_of_the_request_that_created_the_task(tmp_path, exporter) -> None:
    async def script(task: TaskContext) -> None:
        answer = await task.ask("Which name?")
        await task.complete(f"Hello, {answer.parts[0].text}")

    async with running(tmp_path, script) as c:
        with traces.span("request", kind=traces.SpanKind.SERVER) as request:
            task = await send(c, "hi")
        assert task.status.state is TaskState.INPUT_REQUIRED
        context = request.get_span_context()
        flags = int(context.trace_flags)
        expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
        assert await stored_traceparent(c, task.id) == expected

        with traces.span("a later request") as later:
            done = await c.service.send(OWNER, user("Ada", task_id=task.id), SendConfig(blocking=True))
        assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED

    spans = exporter.get_finished_spans()
    runs = named(spans, "agent.run")
    # One run waited for the answer here (a run that had ended, or ran elsewhere, starts again the same
    # way: its parent is the traceparent stored with the task, whoever sent the answer).
    assert len(runs) == 1
    assert all(r.context.trace_id == context.trace_id and r.parent.span_id == context.span_id for r in runs)
    assert all(r.attributes["a2a.task_id"] == task.id for r in runs)
    ours = [s for s in spans if s.context.trace_id == context.trace_id]
    publishes = named(tuple(ours), "bus.publish")
    assert publishes and all(p.attributes["a2a.task_id"] == task.id for p in publishes)
    commits = named(tuple(ours), "store.commit")
    assert commits and all(s.attributes["a2a.writes"] >= 1 for s in commits)
    # The first commit (the new task) is a child of the request span; the runs' are children of the runs.
    parents = {s.parent.span_id for s in commits}
    assert context.span_id in parents and parents & {r.context.span_id for r in runs}
    # The later request's own commit (the answer) is in its trace, not the task's.
    assert any(s.context.trace_id == later.get_span_context().trace_id for s in named(spans, "store.commit"))


async def test_a_commit_batch_of_several_callers_links_them(exporter) -> None:
    with traces.span("one") as one:
        first = traces.current_context()
    with traces.span("two"):
        second = traces.current_context()
    with traces.batch("store.commit", [first, None, second, first], {"a2a.writes": 4}):
        pass
    (batch,) = named(exporter.get_finished_spans(), "store.commit")
    assert batch.parent.span_id == one.get_span_context().span_id
    assert [link.context.span_id for link in batch.links] == [second.span_id]


async def test_with_tracing_off_nothing_is_kept_or_made(tmp_path) -> None:
    async def script(task: TaskContext) -> None:
        await task.complete("done")

    assert not traces.ENABLED
    async with running(tmp_path, script) as c:
        with traces.span("request") as request:
            task = await send(c, "hi")
        assert request is None and task.status.state is TaskState.COMPLETED
        assert await stored_traceparent(c, task.id) is None
    assert traces.traceparent() is None and traces.current_ids() is None


async def test_a_remote_worker_gets_the_traceparent_with_the_task_it_claims() -> None:
    from app.protocol.model import Message as Msg, Part, Role, TaskStatus, iso, utcnow
    from app.runner.remote import RemoteLeases, RemoteTasks
    from app.tasks.worker_wire import Claimed

    task = Task(
        id="t-w",
        context_id="c-w",
        status=TaskStatus(TaskState.SUBMITTED, iso(utcnow())),
        history=[Msg("m-1", Role.USER, [Part(text="hi")], task_id="t-w", context_id="c-w")],
    )
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert "traceparent" not in Claimed(task, "alice", 1).to_wire()
    wire = Claimed(task, "alice", 1, parent).to_wire()

    class Server:
        async def call(
            self, method: str, path: str, body: dict | None = None, **_: object
        ) -> tuple[int, dict]:
            return 200, {"tasks": [wire]}

    tasks = RemoteTasks(Server(), "worker:alice:w1", 10.0)  # type: ignore[arg-type]
    assert await RemoteLeases(Server(), tasks).claim_queued(1) == ["t-w"]  # type: ignore[arg-type]
    assert await tasks.adopt("t-w") and tasks.get("t-w").traceparent == parent
