"""The one-statement write's outbox rows find their webhooks by the task_id index, also in the generic plan
a prepared statement keeps (a join on the whole push_configs table made every write with a webhook cost
more as the table grew)."""

from __future__ import annotations

import asyncpg

from app.store import steps
from tests.conftest import migrated_database_url

_TASK_COLS = (
    "id",
    "context_id",
    "owner",
    "state",
    "status",
    "transitions",
    "metadata",
    "last_seq",
    "created_at",
    "updated_at",
    "status_at",
    "lease_owner",
    "lease_expires_at",
    "retry_key",
)
_CONFIG_COLS = ("task_id", "config_id", "owner", "version", "url", "token", "created_at")


async def generic_plan(dsn: str, sql: str, params: int) -> str:
    """The plan PostgreSQL keeps for `sql` prepared (its `params` parameters are JSON arrays)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute("PREPARE s AS " + sql)
        args = ", ".join(["'[]'"] * params)
        return "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE s({args})"))
    finally:
        await conn.close()


async def test_notifications_look_their_webhooks_up_by_index(tmp_path):
    url = await migrated_database_url("postgres", tmp_path)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    for added in (False, True):  # a step of a task with webhooks, and a new task adding its webhook
        shape = (("tasks", _TASK_COLS), *((("push_configs", _CONFIG_COLS),) if added else ()))
        sql, names = steps._statement(shape, counts=False, notify=True, updates=False)
        text = await generic_plan(dsn, sql, len(names))
        outbox = text[text.index("CTE new_outbox") :]
        assert "Seq Scan on push_configs" not in outbox, outbox
        assert "push_configs" in outbox and "Index" in outbox, outbox
