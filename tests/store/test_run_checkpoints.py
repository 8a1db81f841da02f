"""A task's checkpoint (`store/run_checkpoints.py`) on both databases, migrated as in production: whole or
absent, read for its owner only, refused when corrupt or too large, replaced in place, gone with its task;
and a claim takes a `working` task handed on (no holder, no run started) but never one another holds."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select, update

from app.protocol.model import TaskState
from app.store.db import create_engine
from app.store.leases import Leases
from app.store.models import TaskCheckpointRow, TaskRow
from app.store.run_checkpoints import (
    CheckpointRefusedError,
    CheckpointTooLargeError,
    CorruptCheckpointError,
    RunCheckpoints,
)
from tests.conftest import BACKENDS, migrated_database_url
from tests.store.test_runs_once import seed
from tests.support.inproc import OWNER, seeded_write


@pytest.fixture(params=BACKENDS)
async def engine(request, tmp_path):
    engine = create_engine(await migrated_database_url(request.param, tmp_path))
    yield engine
    await engine.dispose()


async def test_a_checkpoint_is_saved_whole_replaced_and_read_by_its_owner_only(engine):
    await seed(engine, seeded_write("t1", TaskState.WORKING, "r1", 60))
    store = RunCheckpoints(engine, max_bytes=1024)
    assert await store.load("t1", OWNER) is None
    assert await store.info("t1") is None
    await store.save("t1", OWNER, b"first", {"adapter": "claude", "n": 1}, "r1")
    with pytest.raises(CheckpointRefusedError, match="no longer held"):
        await store.save("t1", OWNER, b"late", {}, "worker:alice:w1")
    await store.save("t1", OWNER, b"\x00second\xff", {"adapter": "claude", "n": 2}, "r1")
    got = await store.load("t1", OWNER)
    assert got is not None
    assert (got.data, got.manifest, got.holder) == (
        b"\x00second\xff",
        {"adapter": "claude", "n": 2},
        "r1",
    )
    info = await store.info("t1")
    assert info is not None and (info.size, info.holder) == (len(b"\x00second\xff"), "r1")
    assert info.taken_at.tzinfo is not None
    assert await store.load("t1", "mallory") is None, "another principal never gets it"
    with pytest.raises(CheckpointRefusedError, match="not this principal's"):
        await store.save("t1", "mallory", b"x", {}, "r1")
    assert (await store.load("t1", OWNER)).data == b"\x00second\xff", "nor replaces it"


async def test_a_corrupt_or_too_large_checkpoint_is_refused_and_nothing_half_is_kept(engine):
    await seed(engine, seeded_write("t1", TaskState.WORKING, "r1", 60))
    store = RunCheckpoints(engine, max_bytes=8)
    with pytest.raises(CheckpointTooLargeError, match="over the limit of 8"):
        await store.save("t1", OWNER, b"123456789", {}, "r1")
    assert await store.info("t1") is None
    await store.save("t1", OWNER, b"12345678", {}, "r1")
    async with engine.begin() as conn:
        await conn.execute(update(TaskCheckpointRow).values(data=b"12345670"))
    with pytest.raises(CorruptCheckpointError, match="is corrupt"):
        await store.load("t1", OWNER)
    async with engine.begin() as conn:
        await conn.execute(update(TaskCheckpointRow).values(data=b"1234"))
    with pytest.raises(CorruptCheckpointError):
        await store.load("t1", OWNER)


async def test_a_checkpoint_goes_with_its_task(engine):
    await seed(engine, seeded_write("t1", TaskState.COMPLETED, "r1", 60))
    store = RunCheckpoints(engine, max_bytes=1024)
    await store.save("t1", OWNER, b"data", {}, "r1")
    async with engine.begin() as conn:
        await conn.execute(delete(TaskRow).where(TaskRow.id == "t1"))
    async with engine.connect() as conn:
        assert (await conn.execute(select(TaskCheckpointRow.task_id))).all() == []


async def test_a_claim_takes_a_handed_on_task_but_never_one_held(engine):
    await seed(
        engine,
        seeded_write("handed-on", TaskState.WORKING, "r1", 60, started=True),
        seeded_write("held", TaskState.WORKING, "r2", 60, started=True),
    )
    await Leases(engine, "r1", 15).release(["handed-on"])
    r3 = Leases(engine, "r3", 15)
    assert await r3.claim_queued(5) == ["handed-on"]
    async with engine.connect() as conn:
        rows = dict((await conn.execute(select(TaskRow.id, TaskRow.lease_owner))).all())
    assert rows == {"handed-on": "r3", "held": "r2"}
    assert await r3.claim_queued(5) == []
