"""The group-commit writer on a real database: batches share a transaction, a duplicate fails alone, and a
task's retry key lasts while it runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select, update

from app.protocol.model import utcnow
from app.store import steps
from app.store.db import create_engine
from app.store.models import ArtifactRow, EventRow, MessageRow, PushConfigRow, PushOutboxRow, TaskRow
from app.store.write import Write
from app.store.writer import DuplicateError, SeqTakenError, Writer
from tests.conftest import BACKENDS, migrated_database_url, migrated_pg_database


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


def step_write(task_id: str, seq: int, state: str = "working", text: str = "chunk") -> Write:
    """A running task's plain step: two messages, an event and its artifact chunk, the task row."""
    now = utcnow()
    return Write(
        task_update={
            "_id": task_id,
            "state": state,
            "status": {"state": state},
            "transitions": [{"state": state, "timestamp": "2026-01-01T00:00:02.000Z"}],
            "last_seq": seq,
            "updated_at": now,
            "status_at": "2026-01-01T00:00:02.000Z",
            "lease_owner": "replica-a",
            "lease_expires_at": now,
        },
        messages=[
            {
                "task_id": task_id,
                "owner": "o",
                "message_id": f"{text}-{n}",
                "role": "agent",
                "body": {"n": n},
                "created_at": now,
            }
            for n in range(2)
        ],
        events=[
            {"task_id": task_id, "seq": seq, "kind": "artifact", "body": {"text": text}, "created_at": now}
        ],
        artifacts=[
            {"task_id": task_id, "seq": seq, "artifact_id": "a", "append": True, "body": {"parts": [text]}}
        ],
    )


def test_new_tasks_and_plain_steps_take_the_one_statement_path():
    step_with_key = step_write("v", 4)
    step_with_key.idempotency_key = {"owner": "o", "key": "k"}
    step_with_key.usage = [{"task_id": "v", "seq": 4}]
    with_webhook = new_task_write("w", "m2")
    with_webhook.push_configs = [{"task_id": "w"}]
    with_webhook.notifications = [{"task_id": "w", "seq": 1}]
    assert steps.fits([step_write("t", 2), new_task_write("u", "m"), step_with_key, with_webhook])
    only_key = Write(idempotency_key={"owner": "o", "key": "k"})
    assert not steps.fits([only_key]), "a write that is neither a task nor a step of one"
    for change in (
        {"folded_artifacts": []},
        {"task_metadata": {"_id": "t", "_metadata": {}}},
        {"new_task": new_task_write("t", "m").new_task},
    ):
        w = step_write("t", 2)
        for name, value in change.items():
            setattr(w, name, value)
        assert not steps.fits([step_write("u", 3), w]), change


@pytest.mark.parametrize("backend", BACKENDS)
async def test_steps_of_many_running_tasks_commit_whole_and_in_order(backend, tmp_path):
    """Running tasks' steps (on PostgreSQL one statement for a batch): every row lands, a step's messages
    keep their order, a task leaving `working` loses its retry key and a reaper's mark goes; a step whose
    event number is taken fails alone and leaves nothing of itself."""
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        await asyncio.gather(*(writer.commit(new_task_write(f"t{i}", f"m{i}")) for i in range(20)))
        async with engine.begin() as conn:
            await conn.execute(update(TaskRow).values(lease_suspect_at=utcnow()))
        outcomes = await asyncio.gather(
            *(writer.commit(step_write(f"t{i}", 2, "completed" if i % 2 else "working")) for i in range(20)),
            writer.commit(step_write("t0", 1, text="late")),  # event 1 of t0 is already written
            return_exceptions=True,
        )
        assert outcomes[:20] == [None] * 20
        assert isinstance(outcomes[20], SeqTakenError)
        async with engine.connect() as conn:
            tasks = {r.id: r for r in (await conn.execute(select(TaskRow))).all()}
            assert {t.last_seq for t in tasks.values()} == {2}
            assert all(t.lease_suspect_at is None and t.lease_owner == "replica-a" for t in tasks.values())
            assert tasks["t0"].retry_key == "retry-m0" and tasks["t1"].retry_key is None
            assert tasks["t1"].state == "completed" and tasks["t1"].transitions[0]["state"] == "completed"
            assert await conn.scalar(select(func.count()).select_from(EventRow)) == 40
            assert await conn.scalar(select(func.count()).select_from(ArtifactRow)) == 20
            chunk = await conn.scalar(select(ArtifactRow.body).where(ArtifactRow.task_id == "t5"))
            assert chunk == {"parts": ["chunk"]}
            ordered = (
                await conn.scalars(
                    select(MessageRow.message_id).where(MessageRow.task_id == "t7").order_by(MessageRow.id)
                )
            ).all()
            assert ordered == ["m7", "chunk-0", "chunk-1"]
            late = select(func.count()).select_from(MessageRow).where(MessageRow.message_id.like("late-%"))
            assert await conn.scalar(late) == 0
    finally:
        await writer.stop()
        await engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_webhooks_get_notifications_from_the_statement_that_adds_them(backend, tmp_path):
    """A new task with its webhook and its first notifications, beside a step of a task whose webhook was
    stored before: each webhook gets its own task's notifications (on PostgreSQL in one statement, whose
    snapshot does not see the webhook it adds)."""
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    now = utcnow()

    def hook(task_id: str) -> dict[str, Any]:
        return {
            "task_id": task_id,
            "config_id": f"hook-{task_id}",
            "owner": "o",
            "version": "0.3",
            "url": "https://example.com/hook",
            "token": None,
            "auth_scheme": None,
            "auth_credentials": None,
            "created_at": now,
        }

    def notify(task_id: str, *seqs: int) -> list[dict[str, Any]]:
        return [{"task_id": task_id, "seq": s, "history_len": 1, "created_at": now} for s in seqs]

    try:
        old = new_task_write("old", "m-old")
        old.push_configs, old.notifications = [hook("old")], notify("old", 1)
        await writer.commit(old)
        new = new_task_write("new", "m-new")
        new.push_configs, new.notifications = [hook("new")], notify("new", 1)
        step = step_write("old", 2)
        step.notifications = notify("old", 2)
        await asyncio.gather(writer.commit(new), writer.commit(step))
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(PushConfigRow.task_id, PushOutboxRow.seq)
                    .join(PushConfigRow, PushConfigRow.pk == PushOutboxRow.config_pk)
                    .order_by(PushConfigRow.task_id, PushOutboxRow.seq)
                )
            ).all()
            assert [tuple(r) for r in rows] == [("new", 1), ("old", 1), ("old", 2)]
            attempts = await conn.scalars(select(PushConfigRow.attempts))
            assert set(attempts) == {0}
    finally:
        await writer.stop()
        await engine.dispose()


async def test_a_restarted_postgresql_costs_the_one_statement_path_no_failed_write(own_services):
    """Each flusher keeps its connection between batches; after PostgreSQL restarts, the next write goes on
    a new one (the kept one is closed), so it succeeds at once, as a pooled checkout would."""
    url = await migrated_pg_database(own_services.pg_url)
    engine = create_engine(url)
    writer = Writer(engine, flushers=1)
    writer.start()
    try:
        await writer.commit(new_task_write("t", "m"))
        await writer.commit(step_write("t", 2))
        await asyncio.to_thread(own_services.stop_pg)
        await asyncio.to_thread(own_services.start_pg)
        await asyncio.sleep(0.2)  # the kept connection sees the server's goodbye
        await writer.commit(step_write("t", 3))
        async with engine.connect() as conn:
            assert await conn.scalar(select(TaskRow.last_seq).where(TaskRow.id == "t")) == 3
    finally:
        await writer.stop()
        await engine.dispose()


async def test_a_transaction_that_deadlocks_with_a_step_statement_is_tried_again(tmp_path):
    """A cancel (the writer's transaction: its event, then the task's row) and a remote worker's batch for
    the same task (one statement whose UPDATE of the row may come before its event's insert) can wait on
    each other: PostgreSQL aborts one (40P01). The writer's side is tried again, not handed to the caller
    as a failure: here the other side holds the row and then inserts the same event number, so the writer's
    transaction is the one aborted, and once the other side gives way the retry commits."""
    url = await migrated_database_url("postgresql", tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    other = await engine.connect()
    try:
        await writer.commit(new_task_write("t", "m"))
        cancel = step_write("t", 2, "canceled")
        cancel.task_metadata = {"_id": "t", "_metadata": {"canceledBy": "client"}}
        assert not steps.fits([cancel]), "the transaction path, as a cancel that writes metadata takes"
        await other.exec_driver_sql("BEGIN")
        await other.exec_driver_sql("SET LOCAL deadlock_timeout = '60s'")  # the writer detects it
        await other.exec_driver_sql("UPDATE tasks SET last_seq = 2 WHERE id = 't'")
        committed = asyncio.ensure_future(writer.commit(cancel))
        blocked = (
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.pid <> pg_backend_pid() AND a.datname = current_database()"
        )
        async with engine.connect() as watch:
            for _ in range(600):
                if (await watch.exec_driver_sql(blocked)).scalar():
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the writer's transaction never waited for the task's row")
        insert_event = (
            "INSERT INTO events (task_id, seq, kind, body, created_at) "
            "VALUES ('t', 2, 'status', '{}'::jsonb, now())"
        )
        # Waits for the writer's event 2 until PostgreSQL aborts the writer's transaction, then goes in.
        await other.exec_driver_sql(insert_event)
        await other.exec_driver_sql("ROLLBACK")
        await asyncio.wait_for(committed, 60)
        async with engine.connect() as conn:
            row = (await conn.execute(select(TaskRow).where(TaskRow.id == "t"))).one()
            assert row.state == "canceled" and row.metadata == {"canceledBy": "client"}
            seqs = (await conn.scalars(select(EventRow.seq).where(EventRow.task_id == "t"))).all()
            assert sorted(seqs) == [1, 2]
    finally:
        await other.close()
        await writer.stop()
        await engine.dispose()
