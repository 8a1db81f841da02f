"""The usage sums (`store/usage.py`) on both databases: per context, role, model and day, within days, for
one owner or (an admin's) all, and each owner's sums read by an index of its own rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from app.protocol.model import utcnow
from app.protocol.usage import COST_REPORTED, ModelUsage, Usage
from app.store import rows
from app.store.db import create_engine
from app.store.usage import GROUPS, UsageQuery, UsageReads, grouped
from app.store.write import Write
from app.store.writer import Writer
from tests.conftest import BACKENDS, migrated_database_url

TODAY = utcnow()
YESTERDAY = TODAY - timedelta(days=1)
DAY, DAY_BEFORE = TODAY.date().isoformat(), YESTERDAY.date().isoformat()


def report(model: str, tokens_in: int, cost: float | None = None, **run: int) -> Usage:
    return Usage((ModelUsage(model, tokens_in, 1, 0, 0, cost, COST_REPORTED if cost else None),), **run)


SEEDED = [
    # owner, task, context, role, when, seq, report
    ("alice", "t1", "c1", "default", YESTERDAY, 3, report("m1", 10, 0.5, wall_ms=100, tool_calls=1)),
    ("alice", "t1", "c1", "default", TODAY, 7, report("m1", 20, 0.25, wall_ms=50)),
    ("alice", "t2", "c2", "reviewer", TODAY, 4, report("m2", 5)),
    ("bob", "t3", "c1", "default", TODAY, 3, report("m1", 1000, 9.0, turns=4)),
]


@pytest.fixture(params=BACKENDS)
async def reads(request, tmp_path):
    url = await migrated_database_url(request.param, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        for owner, task, context, role, when, seq, usage in SEEDED:
            await writer.commit(
                Write(usage=rows.usage_rows(task, owner, context, role, [(seq, usage)], when))
            )
        yield UsageReads(engine), engine
    finally:
        await writer.stop()
        await engine.dispose()


def pick(groups: list[dict], *keys: str) -> list[tuple]:
    return [tuple(g[k] for k in keys) for g in groups]


async def test_sums_by_each_group_for_one_owner(reads):
    usage, _ = reads
    groups, total, more = await usage.sums("context", 100, owner="alice")
    assert pick(groups, "contextId", "inputTokens", "costUsd", "reports", "tasks") == [
        ("c1", 30, 0.75, 2, 1),
        ("c2", 5, None, 1, 1),
    ]
    assert (total["inputTokens"], total["costUsd"], total["wallMs"], total["toolCalls"]) == (35, 0.75, 150, 1)
    assert more is False
    groups, _, _ = await usage.sums("role", 100, owner="alice")
    assert pick(groups, "role", "inputTokens") == [("default", 30), ("reviewer", 5)]
    groups, _, _ = await usage.sums("day", 100, owner="alice")
    assert pick(groups, "day", "inputTokens") == [(DAY_BEFORE, 10), (DAY, 25)]
    groups, _, _ = await usage.sums("model", 100, owner="alice")
    assert pick(groups, "model", "inputTokens", "outputTokens") == [("m1", 30, 2), ("m2", 5, 1)]


async def test_filters_days_context_and_role_and_limits(reads):
    usage, _ = reads
    groups, total, _ = await usage.sums("day", 100, owner="alice", since=DAY)
    assert pick(groups, "day", "inputTokens") == [(DAY, 25)] and total["inputTokens"] == 25
    _, total, _ = await usage.sums("day", 100, owner="alice", until=DAY_BEFORE)
    assert total["inputTokens"] == 10
    _, total, _ = await usage.sums("model", 100, owner="alice", context_id="c1")
    assert total["inputTokens"] == 30
    _, total, _ = await usage.sums("model", 100, owner="alice", role="reviewer")
    assert total["inputTokens"] == 5
    groups, total, more = await usage.sums("context", 1, owner="alice")
    assert len(groups) == 1 and more is True and total["inputTokens"] == 35


async def test_owners_are_apart_and_all_owners_key_contexts_by_owner(reads):
    usage, _ = reads
    _, total, _ = await usage.sums("context", 100, owner="bob")
    assert (total["inputTokens"], total["costUsd"], total["turns"]) == (1000, 9.0, 4)
    _, nobody, _ = await usage.sums("context", 100, owner="mallory")
    assert nobody["inputTokens"] == 0 and nobody["reports"] == 0 and nobody["costUsd"] is None
    groups, total, _ = await usage.sums("context", 100, owner=None)
    assert pick(groups, "owner", "contextId", "inputTokens") == [
        ("alice", "c1", 30),
        ("alice", "c2", 5),
        ("bob", "c1", 1000),
    ]
    assert total["inputTokens"] == 1035 and total["tasks"] == 3


async def test_one_owners_sums_read_an_index_of_their_own_rows(reads):
    """What the query planner would do with a table too small to bother: told to avoid a full scan, it has
    an index for every owner-scoped query (PostgreSQL), or picks one anyway (SQLite)."""
    _, engine = reads
    for by in GROUPS:
        for query in (
            UsageQuery("alice"),
            UsageQuery("alice", since=DAY),
            UsageQuery("alice", context_id="c1"),
        ):
            plan = await _plan(engine, by, query)
            assert "ix_task_usage_owner" in plan, (by, query, plan)
    assert "ix_task_usage_day" in await _plan(engine, "day", UsageQuery(None, since=DAY))


async def _plan(engine, by: str, query: UsageQuery) -> str:
    compiled = grouped(query, by).compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
    async with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(text("SET enable_seqscan = off"))
            rows_ = (await conn.execute(text(f"EXPLAIN {compiled}"))).all()
        else:
            rows_ = (await conn.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))).all()
    return "\n".join(str(r[-1]) for r in rows_)
