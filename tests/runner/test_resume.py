"""Sessions that outlive their holder (`tasks/resume.py`), in process (MemoryBus, SQLite): a running task
whose holder died, or whose replica shut down cleanly, goes on from its checkpoint on the next holder, with
the event log continued and every attempt listed; without a checkpoint, or out of attempts, it fails as
before, saying why."""

from __future__ import annotations

import asyncio

from sqlalchemy import select, update

from app.agents.sdk import TaskContext
from app.protocol.attempts import ATTEMPTS_KEY
from app.protocol.model import Message, Part, Role, TaskState, utcnow
from app.protocol.usage import Usage
from app.store import rows
from app.store.db import create_engine
from app.store.models import EventRow, TaskRow, TaskUsageRow
from app.store.run_checkpoints import RunCheckpoints
from app.store.writer import Writer
from tests.support.inproc import OWNER, WAIT_S, running, seeded_write, send, status_text, texts, until


def messages(task) -> list[str]:
    return [m.text() for m in task.history]


async def stored(tmp_path, query) -> list:
    """The rows `query` reads from the test's database, as the components left it."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'a2a.db'}")
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(query)).all())
    finally:
        await engine.dispose()


async def event_numbers(tmp_path, task_id: str) -> list[int]:
    query = select(EventRow.seq).where(EventRow.task_id == task_id).order_by(EventRow.seq)
    return [seq for (seq,) in await stored(tmp_path, query)]


def keep_on_drain(task: TaskContext, data: bytes) -> None:
    """The agent saves `data` as its checkpoint when drained; a task asking "keeps-none" saves none."""

    async def drain() -> bool:
        if task.text == "keeps-none":
            return False
        assert task.checkpoints is not None
        await task.checkpoints.save(data, {})
        return True

    task.on_drain(drain)


async def test_a_dead_holders_task_with_a_checkpoint_goes_on_here_and_one_without_fails(tmp_path):
    seen: list[tuple[str, object, bytes | None]] = []

    async def seed(writer: Writer) -> None:
        await writer.commit(seeded_write("with-checkpoint", TaskState.WORKING, "dead", -60, started=True))
        await writer.commit(seeded_write("without", TaskState.WORKING, "dead", -60, started=True))
        store = RunCheckpoints(writer._engine, 1024)
        await store.save("with-checkpoint", OWNER, b"saved state", {"adapter": "script"}, "dead")

    async def script(task: TaskContext) -> None:
        assert task.checkpoints is not None
        checkpoint = await task.checkpoints.load()
        seen.append((task.id, task.resumed, checkpoint.data if checkpoint else None))
        await task.say(f"went on from {checkpoint.data.decode() if checkpoint else None}")

    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0) as c:
        done = await until(c, "with-checkpoint", TaskState.COMPLETED)
        lost = await until(c, "without", TaskState.FAILED)
    assert texts(done) == ["went on from saved state"]
    [(task_id, resumed, data)] = seen
    assert (task_id, data) == ("with-checkpoint", b"saved state"), "the task without a checkpoint never ran"
    assert resumed is not None and (resumed.attempt, resumed.previous) == (2, "replica dead")
    assert resumed.reason.startswith("Replica dead running this task stopped renewing its lease")
    said = messages(done)
    handed = next(m for m in said if "goes on from its checkpoint of" in m)
    took = said[said.index(handed) + 1]
    assert handed.startswith("Replica dead running this task stopped renewing its lease"), handed
    assert "goes on from its checkpoint of" in handed and "(attempt 2)" in handed
    assert took == "Replica r1 goes on with this task from its checkpoint (attempt 2).", took
    [attempt] = done.metadata[ATTEMPTS_KEY]
    assert (attempt["attempt"], attempt["previous"]) == (2, "replica dead")
    seqs = await event_numbers(tmp_path, "with-checkpoint")
    assert seqs == list(range(1, len(seqs) + 1)), "the event log goes on, dense and in order"
    assert status_text(lost) == (
        "Replica dead running this task stopped renewing its lease (it died or lost contact). "
        "The agent's work was lost."
    )


async def test_a_restarted_replica_hands_on_its_previous_lifes_task_naming_its_restart(tmp_path):
    """The task this replica's previous life ran (its lease under this replica's name, a checkpoint kept)
    goes on at the restart, its hand-on naming the restart rather than a lease that stopped: the reason the
    chaos round accepts either of, when its restart and the reapers race."""

    async def seed(writer: Writer) -> None:
        await writer.commit(seeded_write("mine", TaskState.WORKING, "r1", 60, started=True))
        await RunCheckpoints(writer._engine, 1024).save("mine", OWNER, b"before", {}, "r1")

    async def script(task: TaskContext) -> None:
        assert task.resumed is not None
        await task.say(f"went on as attempt {task.resumed.attempt} after {task.resumed.previous}")

    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0) as c:
        done = await until(c, "mine", TaskState.COMPLETED)
    assert texts(done) == ["went on as attempt 2 after replica r1"]
    [attempt] = done.metadata[ATTEMPTS_KEY]
    assert attempt["reason"] == "Replica r1 restarted while this task was running.", attempt


async def test_a_task_out_of_attempts_fails_saying_so(tmp_path):
    async def seed(writer: Writer) -> None:
        await writer.commit(seeded_write("tired", TaskState.WORKING, "dead", -60, started=True))
        earlier = [{"attempt": n, "previous": "replica x", "reason": "died"} for n in (2, 3)]
        async with writer._engine.begin() as conn:
            await conn.execute(
                update(TaskRow).where(TaskRow.id == "tired").values(metadata_={ATTEMPTS_KEY: earlier})
            )
        await RunCheckpoints(writer._engine, 1024).save("tired", OWNER, b"state", {}, "dead")

    async def script(task: TaskContext) -> None:
        raise AssertionError("a task out of attempts never runs again")

    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0, resume_attempts=2) as c:
        lost = await until(c, "tired", TaskState.FAILED)
    assert status_text(lost).endswith(
        "The agent's work was lost. It went on from a checkpoint 2 time(s) already, the most RESUME_ATTEMPTS "
        "(2) allows."
    ), status_text(lost)


async def test_a_clean_shutdown_drains_a_task_that_then_goes_on_at_the_next_start(tmp_path):
    """The drain hook saves a checkpoint: the task waits `working` with nobody holding it, and the next
    replica (here the same one restarted) goes on with it. A task whose agent saves none fails as before."""
    started: dict[str, asyncio.Event] = {"keeps": asyncio.Event(), "keeps-none": asyncio.Event()}

    async def first(task: TaskContext) -> None:
        keep_on_drain(task, b"half done")
        await task.working("working on it")
        started[task.text].set()
        await asyncio.Event().wait()

    async with running(tmp_path, first) as c:
        keeps = await send(c, "keeps", blocking=False)
        none = await send(c, "keeps-none", blocking=False)
        for event in started.values():
            await asyncio.wait_for(event.wait(), WAIT_S)
    rows = {r.id: r for r in await stored(tmp_path, select(TaskRow))}
    assert rows[keeps.id].state == "working" and rows[keeps.id].lease_owner is None
    assert rows[keeps.id].run_started_at is None, "back in the queue"
    assert rows[none.id].state == "failed"

    async def second(task: TaskContext) -> None:
        assert task.resumed is not None and task.checkpoints is not None
        checkpoint = await task.checkpoints.load()
        assert checkpoint is not None
        await task.say(f"{task.resumed.previous} left {checkpoint.data.decode()}")

    async with running(tmp_path, second) as c:
        done = await until(c, keeps.id, TaskState.COMPLETED)
        failed = await c.service.get(OWNER, none.id)
    assert texts(done) == ["replica r1 left half done"]
    assert any(m.startswith("Replica r1 shut down while this task was running.") for m in messages(done))
    assert (
        status_text(failed) == "Replica r1 shut down while this task was running. The agent's work was lost."
    )


async def test_an_answer_the_dead_holder_never_had_is_told_to_the_run_that_goes_on(tmp_path):
    """The task asked, the answer was written for its holder as it died: the run that goes on is told the
    answer (`Resumed.pending`, in its note); a task whose agent spoke after the user's last message is not."""
    seen: dict[str, str | None] = {}

    async def seed(writer: Writer) -> None:
        for task_id, tail in (("answered", ["May I?", "yes, go"]), ("spoke", ["yes, go", "on it"])):
            write = seeded_write(task_id, TaskState.WORKING, "dead", -60, started=True)
            now = utcnow()
            for n, text in enumerate(tail):
                role = Role.AGENT if text in ("May I?", "on it") else Role.USER
                said = Message(
                    f"{task_id}-{n}", role, [Part(text=text)], context_id=f"ctx-{task_id}", task_id=task_id
                )
                write.messages.append(rows.message_row(task_id, OWNER, said, now))
            await writer.commit(write)
            await RunCheckpoints(writer._engine, 1024).save(task_id, OWNER, b"state", {}, "dead")

    async def script(task: TaskContext) -> None:
        assert task.resumed is not None
        seen[task.id] = task.resumed.pending
        if task.resumed.pending is not None:
            assert task.resumed.note().endswith(f"may not have received:\n{task.resumed.pending}")
        await task.say("went on")

    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0) as c:
        for task_id in ("answered", "spoke"):
            await until(c, task_id, TaskState.COMPLETED)
    assert seen == {"answered": "yes, go", "spoke": None}


async def test_a_clean_shutdown_never_queues_a_started_agent_that_has_not_spoken_yet(tmp_path):
    """An agent that started but emitted nothing (its task still `submitted`) is running all the same:
    at shutdown it is drained and handed on, or else failed; never put back in the queue to run again
    from scratch (the run-twice bug: such a task was released as if it waited, its start cleared)."""
    started: dict[str, asyncio.Event] = {"keeps": asyncio.Event(), "keeps-none": asyncio.Event()}

    async def first(task: TaskContext) -> None:
        keep_on_drain(task, b"quiet")
        started[task.text].set()
        await asyncio.Event().wait()

    async with running(tmp_path, first) as c:
        keeps = await send(c, "keeps", blocking=False)
        none = await send(c, "keeps-none", blocking=False)
        for event in started.values():
            await asyncio.wait_for(event.wait(), WAIT_S)
        for task_id in (keeps.id, none.id):
            assert (await c.service.get(OWNER, task_id)).status.state is TaskState.SUBMITTED
    runs: list[tuple[str, object]] = []

    async def second(task: TaskContext) -> None:
        runs.append((task.text, task.resumed))
        await task.say("went on")

    async with running(tmp_path, second) as c:
        done = await until(c, keeps.id, TaskState.COMPLETED)
        failed = await c.service.get(OWNER, none.id)
    assert [(text, resumed is not None) for text, resumed in runs] == [("keeps", True)], runs
    assert texts(done) == ["went on"]
    assert failed.status.state is TaskState.FAILED
    lost = "Replica r1 shut down while this task was running. The agent's work was lost."
    assert status_text(failed) == lost


async def test_the_usage_of_every_attempt_is_kept_and_summed(tmp_path):
    """The drained run reported its spend before it stopped, the run that goes on reports its own: the task's
    usage is their sum, and each report is a row of the account (what `GET /usage` sums)."""
    reported = asyncio.Event()

    async def first(task: TaskContext) -> None:
        keep_on_drain(task, b"spent")
        await task.usage(Usage.of("m1", input_tokens=100, output_tokens=10, cost_usd=0.25))
        reported.set()
        await asyncio.Event().wait()

    async with running(tmp_path, first) as c:
        keeps = await send(c, "keeps", blocking=False)
        await asyncio.wait_for(reported.wait(), WAIT_S)
        while not ((await c.service.get(OWNER, keeps.id)).metadata or {}).get("usage"):
            await asyncio.sleep(0.05)

    async def second(task: TaskContext) -> None:
        assert task.resumed is not None
        await task.complete("done", usage=Usage.of("m1", input_tokens=50, output_tokens=5, cost_usd=0.5))

    async with running(tmp_path, second) as c:
        done = await until(c, keeps.id, TaskState.COMPLETED)
    assert done.status.state is TaskState.COMPLETED
    [attempt] = done.metadata[ATTEMPTS_KEY]
    assert attempt["attempt"] == 2
    usage = done.metadata["usage"]
    assert (usage["reports"], usage["inputTokens"], usage["outputTokens"]) == (2, 150, 15), usage
    assert usage["costUsd"] == 0.75, usage
    query = select(TaskUsageRow.cost_usd).where(TaskUsageRow.task_id == keeps.id)
    costs = sorted(cost for (cost,) in await stored(tmp_path, query))
    assert costs == [0.25, 0.5], "each attempt's report is a row of the account"
