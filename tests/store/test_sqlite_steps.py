"""The writer on SQLite in one trip per group commit (`app/store/sqlite_steps.py`): every table it writes ends
as SQLAlchemy's own execute leaves it, a commit of a new task with its whole run is one call in the
connection's thread, and a failing statement leaves nothing of its batch, named as before."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.store.db import create_engine
from app.store.write import Write
from app.store.writer import DuplicateError, SeqTakenError, Writer
from tests.conftest import migrated_database_url
from tests.store.test_writer import new_task_write
from tests.support import fill

NOW = datetime(2026, 12, 6, 5, 40, 1, 123456, tzinfo=UTC)
TABLES = (*fill.TABLES, "task_counts")


def hook(task_id: str) -> dict[str, Any]:
    """A webhook row leaving out the columns with defaults (attempts, delivered, failed, ...)."""
    return {
        "task_id": task_id,
        "config_id": f"hook-{task_id}",
        "owner": "o",
        "version": "1.0",
        "url": "https://example.com/hook",
        "token": "t-1",
        "auth_scheme": None,
        "auth_credentials": None,
        "created_at": NOW,
    }


def rich_writes() -> list[list[Write]]:
    """Rounds of writes that use every statement of the writer: new tasks (JSON null and objects, times,
    booleans), steps with artifacts, webhooks and their notifications, usage, an Idempotency-Key, new
    metadata, and a task's end that folds its artifact chunks."""
    first, second = new_task_write("t1", "m1"), new_task_write("t2", "m2")
    for w in (first, second):  # fixed times, so the two databases can be compared
        for row in (w.new_task, *w.messages, *w.events):
            row.update({k: NOW for k in ("created_at", "updated_at") if k in row})
    first.new_task = {**first.new_task, "exclusive": True, "metadata": {"k": [1, None, "é"]}}
    first.push_configs, first.notifications = (
        [hook("t1")],
        [{"task_id": "t1", "seq": 1, "history_len": 1, "created_at": NOW}],
    )
    first.idempotency_key = {
        "owner": "o",
        "key": "idem-1",
        "fingerprint": "f" * 64,
        "task_id": "t1",
        "reply": None,
        "created_at": NOW,
        "expires_at": NOW + timedelta(days=1),
    }
    second.new_task = {**second.new_task, "exclusive": False}
    second.artifacts = [
        {"task_id": "t2", "seq": 2, "artifact_id": "a", "append": False, "body": {"parts": [{"text": "x"}]}},
    ]
    second.events.append({"task_id": "t2", "seq": 2, "kind": "artifact", "body": {}, "created_at": NOW})

    def step(task_id: str, seq: int, state: str, **more: Any) -> Write:
        update = {
            "_id": task_id,
            "state": state,
            "status": {"state": state},
            "transitions": [{"state": state}],
            "last_seq": seq,
            "updated_at": NOW + timedelta(seconds=seq),
            "status_at": "2026-12-06T05:40:02.000Z",
            "lease_owner": None if state == "completed" else "r1",
            "lease_expires_at": None if state == "completed" else NOW + timedelta(seconds=30),
        }
        events = [{"task_id": task_id, "seq": seq, "kind": "status", "body": {"s": seq}, "created_at": NOW}]
        return Write(task_update=update, events=events, **more)

    usage = {
        "task_id": "t1",
        "seq": 2,
        "model": "m",
        "owner": "o",
        "context_id": "ctx",
        "role": "default",
        "day": "2026-12-06",
        "created_at": NOW,
        "input_tokens": 10,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": 0.5,
        "cost_source": "table",
        "wall_ms": 5,
        "turns": 1,
        "tool_calls": 0,
        "reports": 1,
    }
    working = step(
        "t1",
        2,
        "working",
        usage=[usage],
        task_metadata={"_id": "t1", "_metadata": {"usage": {"inputTokens": 10}}},
        notifications=[{"task_id": "t1", "seq": 2, "history_len": 1, "created_at": NOW}],
    )
    chunk = step(
        "t2",
        3,
        "working",
        artifacts=[
            {
                "task_id": "t2",
                "seq": 3,
                "artifact_id": "a",
                "append": True,
                "body": {"parts": [{"text": "y"}]},
            }
        ],
    )
    done = step(
        "t2",
        4,
        "completed",
        folded_artifacts=[
            {
                "task_id": "t2",
                "seq": 3,
                "artifact_id": "a",
                "append": False,
                "body": {"parts": [{"text": "xy"}]},
            }
        ],
    )
    return [[first, second], [working, chunk], [done]]


def dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}


async def write_all(url: str, one_trip: bool) -> None:
    engine = create_engine(url)
    writer = Writer(engine)
    writer._sqlite = one_trip  # the path under test, or SQLAlchemy's execute it replaces
    writer._shard_base = 0  # the counters' shard, random otherwise
    writer.start()
    try:
        for batch in rich_writes():
            await asyncio.gather(*(writer.commit(w) for w in batch))
    finally:
        await writer.stop()
        await engine.dispose()


async def test_every_table_ends_as_sqlalchemys_execute_leaves_it(tmp_path):
    urls = {}
    for one_trip in (True, False):
        folder = tmp_path / str(one_trip)
        folder.mkdir()
        urls[one_trip] = await migrated_database_url("sqlite", folder)
        await write_all(urls[one_trip], one_trip)
    fast, plain = (dump(Path(urls[k].split("///", 1)[1])) for k in (True, False))
    assert all(plain[t] for t in TABLES), {t: len(plain[t]) for t in TABLES}  # every table was written
    for table in TABLES:
        assert fast[table] == plain[table], table


async def test_a_new_task_with_its_whole_run_is_one_trip(tmp_path, trips):
    url = await migrated_database_url("sqlite", tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        await writer.commit(new_task_write("warm", "m-warm"))  # the pool's first connection
        trips.clear()
        (first, _), *_ = rich_writes()
        await writer.commit(first)
        assert trips == ["_run_batch"]
    finally:
        await writer.stop()
        await engine.dispose()


async def test_a_taken_key_fails_its_write_alone_and_leaves_none_of_it(tmp_path):
    """A batch breaking a key is rolled back whole and tried write by write: the duplicate alone fails,
    named as the writer names it; a write whose event number is taken leaves none of its rows."""
    url = await migrated_database_url("sqlite", tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        await writer.commit(new_task_write("t1", "m1"))
        outcomes = await asyncio.gather(
            writer.commit(new_task_write("t2", "m2")),
            writer.commit(new_task_write("t3", "m1")),  # the running t1's first message again
            return_exceptions=True,
        )
        assert outcomes[0] is None and isinstance(outcomes[1], DuplicateError), outcomes
        taken = Write(
            messages=[
                {
                    "task_id": "t2",
                    "owner": "o",
                    "message_id": "m9",
                    "role": "user",
                    "body": {},
                    "created_at": NOW,
                }
            ],
            events=[{"task_id": "t2", "seq": 1, "kind": "status", "body": {}, "created_at": NOW}],
        )
        with pytest.raises(SeqTakenError):
            await writer.commit(taken)
    finally:
        await writer.stop()
        await engine.dispose()
    stored = dump(Path(url.split("///", 1)[1]))
    assert sorted(r[0] for r in stored["tasks"]) == ["t1", "t2"]
    assert all(r[2] != "m9" for r in stored["messages"]), stored["messages"]
