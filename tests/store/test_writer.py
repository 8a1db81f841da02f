"""The group-commit writer on a real database: batches share a transaction, a duplicate fails alone, and a
task's retry key lasts while it runs."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from app.protocol.model import utcnow
from app.store.db import create_engine
from app.store.models import EventRow, MessageRow, TaskRow
from app.store.writer import DuplicateError, SeqTakenError, Write, Writer
from tests.conftest import BACKENDS, migrated_database_url


def new_task_write(task_id: str, message_id: str) -> Write:
    now = utcnow()
    return Write(
        new_task={
            "id": task_id,
            "context_id": "ctx",
            "owner": "o",
            "state": "submitted",
            "status": {"state": "submitted"},
            "transitions": [],
            "metadata": None,
            "last_seq": 1,
            "created_at": now,
            "updated_at": now,
            "status_at": "2026-01-01T00:00:00.000Z",
            "lease_owner": None,
            "lease_expires_at": None,
            "retry_key": f"retry-{message_id}",
        },
        messages=[
            {
                "task_id": task_id,
                "owner": "o",
                "message_id": message_id,
                "role": "user",
                "body": {"messageId": message_id},
                "created_at": now,
            }
        ],
        events=[{"task_id": task_id, "seq": 1, "kind": "status", "body": {}, "created_at": now}],
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_concurrent_writes_commit_and_duplicate_fails_alone(backend, tmp_path):
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        writes = [new_task_write(f"t{i}", f"m{i}") for i in range(50)]
        writes.append(new_task_write("t-dup", "m7"))
        outcomes = await asyncio.gather(*(writer.commit(w) for w in writes), return_exceptions=True)
        assert outcomes[:50] == [None] * 50
        assert isinstance(outcomes[50], DuplicateError), (
            "a second running task of one message is a repeated request"
        )
        for task_id, state in (("t3", "working"), ("t4", "completed")):
            update = Write(
                task_update={
                    "_id": task_id,
                    "state": state,
                    "status": {"state": state},
                    "transitions": [],
                    "last_seq": 2,
                    "updated_at": utcnow(),
                    "status_at": "2026-01-01T00:00:01.000Z",
                    "lease_owner": "replica-a",
                    "lease_expires_at": utcnow(),
                }
            )
            await writer.commit(update)
        taken = Write(
            events=[{"task_id": "t3", "seq": 1, "kind": "status", "body": {}, "created_at": utcnow()}]
        )
        with pytest.raises(SeqTakenError):
            await writer.commit(taken)  # event 1 of t3 is written: another writer took the task
        async with engine.connect() as conn:
            assert await conn.scalar(select(func.count()).select_from(TaskRow)) == 50
            assert await conn.scalar(select(func.count()).select_from(MessageRow)) == 50
            assert await conn.scalar(select(func.count()).select_from(EventRow)) == 50
            assert await conn.scalar(select(TaskRow.state).where(TaskRow.id == "t3")) == "working"
            assert await conn.scalar(select(TaskRow.id).where(TaskRow.id == "t-dup")) is None
            assert await conn.scalar(select(TaskRow.retry_key).where(TaskRow.id == "t3")) == "retry-m3"
            assert await conn.scalar(select(TaskRow.retry_key).where(TaskRow.id == "t4")) is None
        await writer.commit(new_task_write("t-again", "m4"))  # the stopped task's message may start another
    finally:
        await writer.stop()
        await engine.dispose()
