"""Retention's deletes (`store/retention.py`) on both databases: exactly the tasks that ended before the
cutoff go, with every row that hangs off them, in batches of the size asked (a task with more events than a
batch is trimmed first), the counters ListTasks reads stay equal to the tasks there are, usage rows stay,
and the dry run counts what a prune deletes."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from app.protocol.model import TaskState, utcnow
from app.store.db import create_engine
from app.store.models import TaskCountRow
from app.store.retention import Pruning
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.fill import Spec, counters_match_tasks, fill, per_task, rows_of, table_counts

NOW = utcnow()
OLD = NOW - timedelta(days=40)
CUTOFF = NOW - timedelta(days=30)


@pytest.fixture(params=BACKENDS)
async def engine(request, tmp_path):
    url = await migrated_database_url(request.param, tmp_path)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


async def test_prune_deletes_exactly_the_old_ended_tasks_with_their_rows(engine):
    old = {
        "alice": await fill(engine, 300, Spec(owner="alice", at=OLD, contexts=7, tag="a")),
        "bob": await fill(engine, 60, Spec(owner="bob", at=OLD, state=TaskState.FAILED, tag="b", outbox=0)),
        "canceled": await fill(
            engine, 20, Spec(owner="alice", at=OLD, state=TaskState.CANCELED, tag="c", push=False)
        ),
        "big": await fill(engine, 1, Spec(owner="carol", at=OLD, events=250, tag="big")),
    }
    survivors = {
        "recent": await fill(
            engine, 25, Spec(owner="alice", at=NOW - timedelta(days=29), contexts=7, tag="a")
        ),
        "waiting": await fill(
            engine, 10, Spec(owner="alice", at=OLD, state=TaskState.INPUT_REQUIRED, tag="w")
        ),
        "auth": await fill(engine, 3, Spec(owner="bob", at=OLD, state=TaskState.AUTH_REQUIRED, tag="x")),
        "working": await fill(
            engine,
            5,
            Spec(
                owner="bob",
                at=OLD,
                state=TaskState.WORKING,
                tag="y",
                lease_owner="elsewhere",
                lease_expires_at=NOW + timedelta(hours=1),
            ),
        ),
    }
    specs_rows = (
        per_task(Spec(at=OLD), 300)
        + per_task(Spec(at=OLD, outbox=0), 60)
        + per_task(Spec(at=OLD, push=False), 20)
        + per_task(Spec(at=OLD, events=250))
    )
    before = await table_counts(engine)
    pruning = Pruning(engine, batch_tasks=64, batch_rows=100)

    dry = await pruning.count(CUTOFF)
    assert dry == Counter({t: n for t, n in specs_rows.items() if t != "task_usage"})
    assert await table_counts(engine) == before

    batches: list[Counter[str]] = []
    done = await pruning.prune(CUTOFF, on_batch=batches.append)

    assert {t: done[t] for t in dry} == dict(dry)
    assert all(b["tasks"] <= 64 for b in batches)
    assert sum(b["tasks"] for b in batches) == 381
    assert all(b["events"] <= 100 for b in batches if b["tasks"] > 1)
    after = await table_counts(engine)
    gone = Counter({t: n for t, n in specs_rows.items() if t != "task_usage"})
    assert after == before - gone + Counter({"task_usage": 0})
    assert after["task_usage"] == before["task_usage"]
    every_old = [i for ids in old.values() for i in ids]
    assert +(await rows_of(engine, every_old)) == Counter({"task_usage": 381})
    for name, ids in survivors.items():
        spec_rows = await rows_of(engine, ids)
        assert spec_rows["tasks"] == len(ids), name
        assert spec_rows["events"] == 4 * len(ids), name
    await counters_match_tasks(engine)
    # bob's failed tasks each had a context of their own: their counter rows went with them.
    async with engine.connect() as conn:
        left = (
            await conn.execute(select(func.count()).where(TaskCountRow.context_id.like("b-ctx-%")))
        ).scalar_one()
    assert left == 0
    assert done["task_counts"] > 0

    assert await pruning.count(CUTOFF) == Counter(dict.fromkeys(dry, 0))
    assert await pruning.prune(CUTOFF) == Counter()


async def test_counters_spread_over_shards_are_taken_down_to_what_is_left(engine):
    """The writer counts on several shards; a prune takes its tasks off whichever rows hold them."""
    await fill(engine, 5, Spec(owner="dana", at=OLD, contexts=1, tag="d"))
    await fill(engine, 2, Spec(owner="dana", at=NOW, contexts=1, tag="d"))
    async with engine.begin() as conn:
        # dana's 7 tasks as three flushers would have counted them: 1 on shard 0, 2 on shard 3, 4 on shard 6.
        await conn.execute(text("DELETE FROM task_counts WHERE owner = 'dana'"))
        for context in ("", "d-ctx-0"):
            for shard, n in ((0, 1), (3, 2), (6, 4)):
                await conn.execute(
                    text("INSERT INTO task_counts (owner, context_id, shard, n) VALUES ('dana', :c, :s, :n)"),
                    {"c": context, "s": shard, "n": n},
                )
    done = await Pruning(engine, batch_tasks=2).prune(CUTOFF)
    assert done["tasks"] == 5
    await counters_match_tasks(engine)


async def test_waiting_before_lists_the_tasks_left_waiting(engine):
    waiting = await fill(engine, 3, Spec(owner="alice", at=OLD, state=TaskState.INPUT_REQUIRED, tag="w"))
    auth = await fill(
        engine, 1, Spec(owner="bob", at=OLD, state=TaskState.AUTH_REQUIRED, tag="x", role="rev")
    )
    await fill(engine, 2, Spec(owner="alice", at=NOW, state=TaskState.INPUT_REQUIRED, tag="n"))
    await fill(engine, 2, Spec(owner="alice", at=OLD, tag="o"))
    # Old but not waiting for anyone: a long run streaming only artifacts, a task queued for long.
    await fill(engine, 2, Spec(owner="alice", at=OLD, state=TaskState.WORKING, tag="r"))
    await fill(engine, 2, Spec(owner="alice", at=OLD, state=TaskState.SUBMITTED, tag="q"))
    found = await Pruning(engine).waiting_before(NOW - timedelta(hours=1))
    assert {w.task_id for w in found} == {*waiting, *auth}
    assert {(w.owner, w.role) for w in found} == {("alice", "default"), ("bob", "rev")}
    assert len(await Pruning(engine).waiting_before(NOW - timedelta(hours=1), limit=2)) == 2


async def test_one_pruner_at_a_time(engine):
    """PostgreSQL: the turn is an advisory lock, one process's at a time; SQLite (one process): always."""
    other = create_engine(engine.url.render_as_string(hide_password=False))
    try:
        first, second = Pruning(engine), Pruning(other)
        async with first.turn() as mine:
            assert mine
            async with second.turn() as theirs:
                assert theirs is (engine.dialect.name != "postgresql")
        async with second.turn() as theirs:
            assert theirs
    finally:
        await other.dispose()
