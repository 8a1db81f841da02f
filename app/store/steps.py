"""A running task's step in one PostgreSQL statement: the writer's fast path.

Most writes are steps of running tasks (a chunk, a status note): rows added to the messages, events and
artifacts and the task's row brought up to date. In one transaction that is five round trips (BEGIN, three
statements, COMMIT), most of a streamed event's delay from its agent to its reader. PostgreSQL runs
data-modifying WITH clauses as one statement, atomic on its own, so the same rows go in one autocommitted
round trip: each table's rows travel as one JSON array (`jsonb_populate_recordset` types them by the
table's own columns), so the statement's text depends only on which tables a batch touches and stays
prepared.

Only what one snapshot can do qualifies (`fits`): no new task, no folding (it deletes rows it would also
insert), no webhooks (their outbox rows read the configs), no metadata, usage or idempotency keys. The rest
goes through the writer's transaction as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import TextClause, text

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .writer import Write

_INSERTS = (
    ("messages", "task_id, owner, message_id, role, body, created_at"),
    ("events", "task_id, seq, kind, body, created_at"),
    ("artifacts", "task_id, seq, artifact_id, append, body"),
)
# In order (WITH ORDINALITY): a message's id is its place in the task's history.
_INSERT = (
    "{table} AS (INSERT INTO {table} ({cols}) SELECT {cols} "
    "FROM jsonb_populate_recordset(NULL::{table}, CAST(:{table} AS jsonb)) WITH ORDINALITY AS r "
    "ORDER BY r.ordinality)"
)
# As the writer's `_update_task`: a step is its holder alive (the suspicion mark goes), and a retry key
# stays only while the task runs.
_UPDATE = (
    "UPDATE tasks SET state = u.state, status = u.status, transitions = u.transitions, "
    "last_seq = u.last_seq, updated_at = u.updated_at, status_at = u.status_at, lease_owner = u.lease_owner, "
    "lease_expires_at = u.lease_expires_at, lease_suspect_at = NULL, "
    "retry_key = CASE WHEN u.state IN ('submitted', 'working') THEN tasks.retry_key END "
    "FROM jsonb_populate_recordset(NULL::tasks, CAST(:tasks AS jsonb)) AS u WHERE tasks.id = u.id"
)
_statements: dict[tuple[bool, ...], TextClause] = {}


def fits(writes: Sequence[Write]) -> bool:
    """Whether every write is a plain step of a running task (see the module doc)."""
    return all(
        w.task_update is not None
        and w.new_task is None
        and w.folded_artifacts is None
        and w.task_metadata is None
        and w.idempotency_key is None
        and not w.usage
        and not w.push_configs
        and not w.notifications
        for w in writes
    )


def _statement(present: tuple[bool, ...]) -> TextClause:
    stmt = _statements.get(present)
    if stmt is None:
        inserts = [_INSERT.format(table=t, cols=c) for (t, c), p in zip(_INSERTS, present, strict=True) if p]
        sql = ("WITH " + ", ".join(inserts) + " " if inserts else "") + _UPDATE
        stmt = _statements[present] = text(sql)
    return stmt


async def write(conn: AsyncConnection, writes: Sequence[Write]) -> None:
    """The writes' rows in one statement, on an autocommitting connection."""
    rows = (
        [m for w in writes for m in w.messages],
        [e for w in writes for e in w.events],
        [a for w in writes for a in w.artifacts],
    )
    # One row per task (a later step of a task in the batch wins): a statement changes a row once.
    updates: dict[str, dict[str, Any]] = {}
    for w in writes:
        assert w.task_update is not None
        u = w.task_update
        updates[u["_id"]] = {"id": u["_id"], **{k: v for k, v in u.items() if k != "_id"}}
    params = {t: orjson.dumps(r).decode() for (t, _), r in zip(_INSERTS, rows, strict=True) if r}
    params["tasks"] = orjson.dumps(list(updates.values())).decode()
    await conn.execute(_statement(tuple(bool(r) for r in rows)), params)
