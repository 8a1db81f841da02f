"""A run is started once (`run_started_at`, `store/leases.py`), on both databases: a claim marks the run it
starts from (unless the agent is `pure`); a `submitted` task left with its run started is never claimed
again, only reaped (`Held.running`, `seize`); a released one is claimable again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.protocol.model import TaskState, utcnow
from app.store.db import create_engine
from app.store.leases import Held, Leases
from app.store.models import TaskRow
from app.store.writer import Writer
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.inproc import seeded_write


@pytest.fixture(params=BACKENDS)
async def engine(request, tmp_path):
    engine = create_engine(await migrated_database_url(request.param, tmp_path))
    yield engine
    await engine.dispose()


async def seed(engine, *writes) -> None:
    writer = Writer(engine)
    writer.start()
    try:
        for write in writes:
            await writer.commit(write)
    finally:
        await writer.stop()


async def void(engine, task_id: str) -> None:
    """What a dead holder leaves after a reaper's mark and a lease TTL: a void lease."""
    past = utcnow() - timedelta(minutes=10)
    async with engine.begin() as conn:
        await conn.execute(
            update(TaskRow).where(TaskRow.id == task_id).values(lease_expires_at=past, lease_suspect_at=past)
        )


async def started_at(engine, task_id: str):
    async with engine.connect() as conn:
        return (await conn.execute(select(TaskRow.run_started_at).where(TaskRow.id == task_id))).scalar()


async def test_a_claim_marks_the_run_and_a_started_task_is_reaped_never_claimed_again(engine):
    await seed(
        engine,
        seeded_write("queued", TaskState.SUBMITTED, "dead", -60),
        seeded_write("started", TaskState.SUBMITTED, "dead", -60, started=True),
    )
    for task_id in ("queued", "started"):
        await void(engine, task_id)
    r1 = Leases(engine, "r1", 15)
    assert await r1.claim_queued(10) == ["queued"], "a started run's task is not claimable"
    assert await started_at(engine, "queued") is not None, "the claim marked the run it starts"
    (held,) = await r1.expired()
    assert (held.task_id, held.state, held.started, held.running) == (
        "started",
        TaskState.SUBMITTED,
        True,
        True,
    )
    assert await r1.seize(held) is not None, "a reaper takes it, to end it as lost"


async def test_a_pure_agents_claim_marks_nothing_and_a_release_clears_the_mark(engine):
    await seed(
        engine,
        seeded_write("a", TaskState.SUBMITTED, "dead", -60),
        seeded_write("b", TaskState.SUBMITTED, "dead", -60),
    )
    for task_id in ("a", "b"):
        await void(engine, task_id)
    pure = Leases(engine, "r-pure", 15, runs_once=False)
    once = Leases(engine, "r-once", 15)
    assert await pure.claim_queued(1) == ["a"]
    assert await started_at(engine, "a") is None, "a pure agent's run may run again"
    assert await once.claim_queued(1) == ["b"] and await started_at(engine, "b") is not None
    await once.release(["b"])
    assert await started_at(engine, "b") is None, "given back unstarted: claimable again"
    assert await pure.claim_queued(1) == ["b"]
    (held,) = [h for h in await pure.mine() if h.task_id == "b"]
    assert not held.started and not held.running


@pytest.mark.parametrize("state", [TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED])
def test_a_task_waiting_for_its_user_is_not_running_though_its_run_once_started(state: TaskState) -> None:
    """The mark stays when the run goes on (`working`, then a question): a waiting task is not lost with
    its holder (it is answered, and its run resumed), whatever the mark says."""
    assert not Held("t", state, "r1", started=True).running
    assert Held("t", TaskState.WORKING, "r1").running
    assert Held("t", TaskState.SUBMITTED, "r1", started=True).running
    assert not Held("t", TaskState.SUBMITTED, "r1").running
