"""The runner in process (MemoryBus, SQLite): its slot limit queues what does not fit, an agent that
raises or overruns its timeout fails its task with the reason, and a restart settles what the replica's
previous life (or a dead replica) left: adopting queued tasks, failing lost runs."""

from __future__ import annotations

import asyncio
import logging
import re

from app.agents.sdk import TaskContext
from app.protocol.model import TaskState
from app.store.writer import Writer
from tests.support.inproc import OWNER, WAIT_S, running, seeded_write, send, status_text, texts, until

RESTARTED_LOST = "Replica r1 restarted while this task was running. The agent's work was lost."


async def test_a_task_beyond_max_concurrent_waits_submitted_until_a_slot_frees(tmp_path):
    started: dict[str, asyncio.Event] = {}
    release: dict[str, asyncio.Event] = {}
    now_running = 0
    most = 0

    async def script(task: TaskContext) -> None:
        nonlocal now_running, most
        now_running += 1
        most = max(most, now_running)
        started.setdefault(task.text, asyncio.Event()).set()
        await release.setdefault(task.text, asyncio.Event()).wait()
        now_running -= 1
        await task.say(f"done {task.text}")

    async with running(tmp_path, script, max_concurrent_tasks=2) as c:
        ids = [(await send(c, name, blocking=False)).id for name in ("a", "b", "c")]
        for name in ("a", "b"):
            await asyncio.wait_for(started.setdefault(name, asyncio.Event()).wait(), WAIT_S)
        assert c.runner.running == 2
        assert (await c.service.get(OWNER, ids[2])).status.state is TaskState.SUBMITTED
        assert "c" not in started
        release.setdefault("a", asyncio.Event()).set()
        assert texts(await until(c, ids[0], TaskState.COMPLETED)) == ["done a"]
        await asyncio.wait_for(started.setdefault("c", asyncio.Event()).wait(), WAIT_S)
        release.setdefault("b", asyncio.Event()).set()
        release.setdefault("c", asyncio.Event()).set()
        for task_id, name in zip(ids[1:], ("b", "c"), strict=True):
            assert texts(await until(c, task_id, TaskState.COMPLETED)) == [f"done {name}"]
        assert most == 2


async def test_a_freed_slot_claims_the_queued_task_at_once_and_a_run_with_nothing_queued_claims_nothing(
    tmp_path,
):
    """The poll is an hour: only the doorbell and the freed slot can start the queued task in time; and a
    run that ends with nothing queued costs no claim transaction."""
    release = asyncio.Event()

    async def script(task: TaskContext) -> None:
        if task.text == "slow":
            await release.wait()
        await task.say(f"done {task.text}")

    async with running(tmp_path, script, max_concurrent_tasks=1, queue_poll_s=3600) as c:
        leases = c.runner._leases
        claims = 0
        claim = leases.claim_queued

        async def counted(limit: int) -> list[str]:
            nonlocal claims
            claims += 1
            return await claim(limit)

        leases.claim_queued = counted
        await asyncio.sleep(0.05)  # the loop's first claim (at start) has run
        before = claims
        for i in range(3):
            assert texts(await send(c, f"quick {i}")) == [f"done quick {i}"]
        await asyncio.sleep(0.05)
        assert claims == before, "runs that ended with nothing queued claimed nothing"

        slow = await send(c, "slow", blocking=False)
        queued = await send(c, "queued", blocking=False)
        assert (await c.service.get(OWNER, queued.id)).status.state is TaskState.SUBMITTED
        release.set()
        assert texts(await until(c, slow.id, TaskState.COMPLETED)) == ["done slow"]
        assert texts(await until(c, queued.id, TaskState.COMPLETED)) == ["done queued"]


async def test_an_agent_that_raises_fails_its_task_with_the_reason(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.say("partial")
        raise RuntimeError("the model is on fire")

    async with running(tmp_path, script) as c:
        task = await send(c, "go")
        assert task.status.state is TaskState.FAILED
        assert status_text(task) == "The agent failed: RuntimeError: the model is on fire"
        assert texts(task) == ["partial"]
        assert c.runner.running == 0


async def test_an_agent_past_its_timeout_is_stopped_and_its_task_failed(tmp_path):
    stopped = asyncio.Event()

    async def script(task: TaskContext) -> None:
        async def hook() -> None:
            stopped.set()

        task.on_cancel(hook)
        await asyncio.Event().wait()

    async with running(tmp_path, script, agent_timeout_s=0.2) as c:
        task = await send(c, "never ends")
        assert task.status.state is TaskState.FAILED
        assert status_text(task) == "The agent did not finish within 0.2 s and was stopped."
        assert stopped.is_set(), "the agent's cancel hooks ran"


async def test_start_up_adopts_queued_tasks_and_ends_lost_runs(tmp_path):
    async def seed(writer: Writer) -> None:
        await writer.commit(seeded_write("mine-working", TaskState.WORKING, "r1", 60))
        await writer.commit(seeded_write("mine-queued", TaskState.SUBMITTED, "r1", 60))
        await writer.commit(seeded_write("dead-working", TaskState.WORKING, "dead", -60))
        await writer.commit(seeded_write("alive-working", TaskState.WORKING, "other", 60))

    async def script(task: TaskContext) -> None:
        await task.say(f"ran {task.id}")

    # A short lease: the dead replica's lease is void one TTL after a reaper marks it expired.
    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0) as c:
        lost = await until(c, "mine-working", TaskState.FAILED)
        assert status_text(lost) == RESTARTED_LOST
        adopted = await until(c, "mine-queued", TaskState.COMPLETED)
        assert texts(adopted) == ["ran mine-queued"]
        reaped = await until(c, "dead-working", TaskState.FAILED)
        assert status_text(reaped).startswith("Replica dead running this task stopped renewing its lease")
        alive = await c.service.get(OWNER, "alive-working")
        assert alive.status.state is TaskState.WORKING, "a live lease of another replica is left alone"


async def test_a_started_run_whose_holder_died_before_its_first_event_is_lost_never_run_again(tmp_path):
    """A `submitted` task whose run was started (`run_started_at`, committed with the claim or creation)
    but whose holder died before the run's first event: its holder's next life and another replica's
    reaper end it `failed` as lost; its agent never starts again. One with no run started is claimed and
    run, as before."""
    ran: list[str] = []

    async def seed(writer: Writer) -> None:
        await writer.commit(seeded_write("mine-started", TaskState.SUBMITTED, "r1", 60, started=True))
        await writer.commit(seeded_write("dead-started", TaskState.SUBMITTED, "dead", -60, started=True))
        await writer.commit(seeded_write("dead-queued", TaskState.SUBMITTED, "dead", -60))

    async def script(task: TaskContext) -> None:
        ran.append(task.id)
        await task.say(f"ran {task.id}")

    async with running(tmp_path, script, seed=seed, lease_ttl_s=1.0) as c:
        lost = await until(c, "mine-started", TaskState.FAILED)
        assert status_text(lost) == RESTARTED_LOST
        reaped = await until(c, "dead-started", TaskState.FAILED)
        assert status_text(reaped).startswith("Replica dead running this task stopped renewing its lease")
        claimed = await until(c, "dead-queued", TaskState.COMPLETED)
        assert texts(claimed) == ["ran dead-queued"]
    assert ran == ["dead-queued"], "a task whose run had started is never run again"


async def test_a_run_gives_back_its_slot_as_its_task_ends_so_the_next_send_runs_at_once(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.complete(f"done {task.text}")
        await asyncio.sleep(0.2)  # like a CLI whose process exits a moment after its result

    async with running(tmp_path, script, max_concurrent_tasks=1) as c:
        rang = 0
        ring = c.bus.ring_queue

        async def counted() -> None:
            nonlocal rang
            rang += 1
            await ring()

        c.bus.ring_queue = counted  # type: ignore[method-assign]
        for i in range(3):
            task = await send(c, f"t{i}")
            assert task.status.state is TaskState.COMPLETED
        assert rang == 0, "each send found the slot its previous one used free: none was queued"


async def test_tasks_queued_behind_a_full_runner_start_in_turn_as_slots_free_not_at_the_poll(tmp_path):
    """One slot and a queue poll of an hour: each task queued behind the running one starts as soon as the
    slot frees (a freed slot claims at once while work may be waiting), never an hour later."""
    gates = {text: asyncio.Event() for text in ("one", "two", "three")}
    started: list[str] = []

    async def script(task: TaskContext) -> None:
        started.append(task.text)
        await gates[task.text].wait()
        await task.complete(task.text)

    async def started_are(expected: list[str]) -> None:
        async with asyncio.timeout(WAIT_S):
            while started != expected:
                await asyncio.sleep(0.01)

    async with running(tmp_path, script, max_concurrent_tasks=1, queue_poll_s=3600) as c:
        tasks = [await send(c, text, blocking=False) for text in ("one", "two", "three")]
        await started_are(["one"])
        assert [(await c.service.get(OWNER, t.id)).status.state for t in tasks[1:]] == [
            TaskState.SUBMITTED
        ] * 2
        for i, text in enumerate(("one", "two")):
            gates[text].set()
            assert (await until(c, tasks[i].id, TaskState.COMPLETED)).status.state is TaskState.COMPLETED
            await started_are(["one", "two", "three"][: i + 2])
        gates["three"].set()
        await until(c, tasks[2].id, TaskState.COMPLETED)


async def test_a_run_logs_its_start_and_end_at_info_and_a_pure_agents_at_debug(tmp_path, caplog):
    """What an operator follows a worker's or a replica's work by: a line as a run starts and one as it is
    over, with the task's state; a pure agent's runs, one per request, stay at debug."""

    async def script(task: TaskContext) -> None:
        await task.say("done")

    caplog.set_level(logging.DEBUG, logger="app.runner.run")
    for pure, level in ((False, logging.INFO), (True, logging.DEBUG)):
        caplog.clear()
        async with running(tmp_path / str(pure), script, pure=pure) as c:
            task = await send(c, "go")
            assert task.status.state is TaskState.COMPLETED
        lines = [(r.levelno, r.getMessage()) for r in caplog.records if task.id in r.getMessage()]
        assert [lv for lv, _ in lines] == [level, level], lines
        assert lines[0][1].startswith(f"task {task.id}: run started on "), lines
        assert re.fullmatch(rf"task {task.id}: run over after \d+\.\d s, task completed", lines[1][1]), lines
