"""The store itself refuses another principal's task, on both databases: every owner-scoped read and lease
take names the owner in its query, so a caller holding only a task id learns nothing and changes nothing,
whatever the task service above checks again."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.protocol.model import TaskState
from app.store.db import create_engine
from app.store.leases import Leases
from app.store.models import TaskRow
from app.store.repo import Repository
from app.store.writer import Writer
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.inproc import OWNER, seeded_write


@pytest.mark.parametrize("backend", BACKENDS)
async def test_another_owners_task_is_neither_read_nor_leased(backend, tmp_path):
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        # An idle task of alice's, its lease long expired: anyone may take it, but only for alice.
        await writer.commit(seeded_write("t-alice", TaskState.INPUT_REQUIRED, "r-old", -60))
        repo = Repository(engine)
        leases = Leases(engine, "r-mallory", 15)

        assert await repo.get_task("t-alice", owner="mallory") is None
        assert await repo.get_task("t-alice", owner="mallory", to_write=True) is None
        assert await repo.task_head("t-alice", owner="mallory") is None
        assert await repo.first_message("mallory", "ctx-t-alice") is None
        assert await leases.holder("t-alice", owner="mallory") is None
        assert await leases.take("t-alice", owner="mallory") is False
        assert await leases.take_from("t-alice", owner="mallory") is False
        async with engine.connect() as conn:
            lease = (await conn.execute(select(TaskRow.lease_owner).where(TaskRow.id == "t-alice"))).scalar()
        assert lease == "r-old", "a refused take changed nothing"

        mine = await repo.get_task("t-alice", owner=OWNER)
        assert mine is not None and mine.owner == OWNER
        assert (await repo.task_head("t-alice", owner=OWNER)) is not None
        opening = await repo.first_message(OWNER, "ctx-t-alice")
        assert opening is not None and opening.text() == "seeded", "the message that opened the context"
        assert await repo.first_message(OWNER, "ctx-none") is None
        assert await leases.take_from("t-alice", owner=OWNER) == "r-old", "the owner's call takes it"
    finally:
        await writer.stop()
        await engine.dispose()
