"""A step whose caller is cancelled mid-commit (a run's hard limit, `AGENT_TIMEOUT_S`, firing while its
events commit; a run stopped): the group-commit writer still stores it, unseen by the live task. The task's
next write must not take its own event numbers for another replica's and drop the task: the run's end is
written with its reason, not left to a reaper's "stopped renewing its lease" a lease TTL later."""

from __future__ import annotations

import asyncio

from app.protocol.events import ArtifactUpdate
from app.protocol.model import Artifact, Part, TaskState
from tests.support.inproc import OWNER, WAIT_S, running, send


async def _until(check, what: str) -> None:
    """Wait for a state (`check`), never for a window; a TimeoutError names `what` never came."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not await check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what} never came") from None


async def test_a_step_cancelled_mid_commit_still_lets_the_run_end_its_task(tmp_path):
    go = asyncio.Event()

    async def waits(task) -> None:
        await task.say("started")
        await go.wait()

    async with running(tmp_path, waits) as c:
        task = await send(c, "work", blocking=False)
        await _until(lambda: _working(c, task.id), "the run's first step")
        live = c.tasks.get(task.id)
        assert live is not None
        seq = live.seq
        chunk = ArtifactUpdate(
            task.id, task.context_id, Artifact(artifact_id="out", parts=[Part(text="partial")])
        )
        step = asyncio.create_task(c.tasks.record(task.id, [chunk]))
        await asyncio.sleep(0)  # the step runs until it waits for its commit
        assert not step.done() and c.writer.pending >= 1, "the step is queued in the writer"
        step.cancel()
        await asyncio.gather(step, return_exceptions=True)

        async def landed() -> bool:
            stored = await c.tasks.parts.leases.recorded(task.id)
            return stored is not None and stored[0] > seq

        await _until(landed, "the cancelled step's commit")
        assert live.seq == seq, "the live task did not see the step land"

        await c.tasks.fail(task.id, "The agent did not finish within 20 s and was stopped.", wait=True)
        stored = await c.tasks.parts.repo.get_task(task.id, owner=OWNER)
        assert stored is not None
        assert stored.task.status.state is TaskState.FAILED
        assert "did not finish within 20 s" in (stored.task.status.message.text() or "")
        assert [a.artifact_id for a in stored.task.artifacts if a.artifact_id == "out"] == ["out"]
        events = await c.tasks.parts.repo.events_after(task.id, task.context_id, 0, owner=OWNER)
        assert [e.seq for e in events] == list(range(1, stored.last_seq + 1))
        assert c.tasks.get(task.id) is None
        go.set()


async def _working(c, task_id: str) -> bool:
    live = c.tasks.get(task_id)
    return live is not None and live.task.status.state is TaskState.WORKING and live.seq >= 3
