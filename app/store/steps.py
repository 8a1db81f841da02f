"""A running task's step in one PostgreSQL statement: the writer's fast path.

Most writes are a new task (with, for an agent that answers at once, its whole run) or a step of a running
task (a chunk, a status note): rows added to a few tables and the task's row inserted or brought up to date.
In one transaction that is a round trip per table plus BEGIN and COMMIT: most of a streamed event's delay
from its agent to its reader, and most of a blocking send's time. PostgreSQL runs data-modifying WITH
clauses as one statement, atomic on its own, so the same rows go in one autocommitted round trip: each
table's rows travel as one JSON array (`jsonb_populate_recordset` types them by the table's own columns),
so the statement's text depends only on which tables and columns a batch has, and stays prepared.
Constraints are checked as before (a taken key fails the whole statement, named as the writer expects), and
foreign keys at its end, when the new task's row is there.

The statement goes straight to the flusher's asyncpg connection, as one prepared statement with text
parameters: through SQLAlchemy's execute the same round trip took 0.1 ms more (about 0.09 ms of CPU), a
tenth of a blocking send. A taken key is raised as SQLAlchemy's IntegrityError (the writer names the
conflict from it); a lost connection as asyncpg raises it (`outage.is_unavailable` knows both).

Only what one snapshot can do qualifies (`fits`): no folding (it deletes rows it would also insert), no
second change of a task's row (metadata). The rest goes through the writer's transaction as before. New
webhooks and their notifications do fit: the outbox rows join the configs stored before with those the
statement adds (`RETURNING`), which its snapshot cannot see in the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import asyncpg
import orjson
from sqlalchemy.exc import IntegrityError

from .models import Base

if TYPE_CHECKING:
    from .write import Write

_TABLES = ("tasks", "messages", "events", "artifacts", "task_usage", "idempotency_keys", "push_configs")
"""The tables a fitting write inserts into; each insert names the columns its rows carry (the others get
their defaults), checked against the table once per statement built."""
# In order (WITH ORDINALITY): a message's id is its place in the task's history.
_INSERT = (
    "new_{table} AS (INSERT INTO {table} ({cols}) SELECT {cols} "
    "FROM jsonb_populate_recordset(NULL::{table}, CAST(:{table}::text AS jsonb)) WITH ORDINALITY AS r "
    "ORDER BY r.ordinality)"
)
# As the writer's `_count_upsert`, the rows in key order (see `Writer._flush`).
_COUNT = (
    "new_counts AS (INSERT INTO task_counts (owner, context_id, shard, n) "
    "SELECT owner, context_id, shard, n "
    "FROM jsonb_populate_recordset(NULL::task_counts, CAST(:task_counts::text AS jsonb)) AS r "
    "ORDER BY owner, context_id "
    "ON CONFLICT (owner, context_id, shard) DO UPDATE SET n = task_counts.n + excluded.n)"
)
# As the writer's `_notify`: an outbox row per webhook of the task, those stored before and those this
# statement adds (which its own snapshot cannot see in the table). Looked up per notification, by the
# task_id index (LATERAL, and OFFSET 0 so the planner cannot flatten it back into a join): a join's generic
# plan, the one a prepared statement keeps, hashed a scan of the whole push_configs table, a cost on every
# write with a webhook that grew with the table.
_NOTIFY = (
    "new_outbox AS (INSERT INTO push_outbox (config_pk, seq, history_len, attempts, created_at) "
    "SELECT c.pk, n.seq, n.history_len, 0, n.created_at "
    "FROM jsonb_to_recordset(CAST(:notifications::text AS jsonb)) "
    "AS n(task_id VARCHAR, seq INTEGER, history_len INTEGER, created_at TIMESTAMPTZ) "
    "CROSS JOIN LATERAL ({configs} OFFSET 0) AS c)"
)
_STORED_CONFIGS = "SELECT pk FROM push_configs WHERE task_id = n.task_id"
_ADDED_CONFIGS = " UNION ALL SELECT pk FROM new_push_configs WHERE task_id = n.task_id"
# As the writer's `_update_task`: a step is its holder alive (the suspicion mark goes), and a retry key
# stays only while the task runs.
_UPDATE = (
    "UPDATE tasks SET state = u.state, status = u.status, transitions = u.transitions, "
    "last_seq = u.last_seq, updated_at = u.updated_at, status_at = u.status_at, lease_owner = u.lease_owner, "
    "lease_expires_at = u.lease_expires_at, lease_suspect_at = NULL, "
    "retry_key = CASE WHEN u.state IN ('submitted', 'working') THEN tasks.retry_key END "
    "FROM jsonb_populate_recordset(NULL::tasks, CAST(:updates::text AS jsonb)) AS u WHERE tasks.id = u.id"
)
_statements: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}
"""Per shape: the statement, with asyncpg's numbered parameters, and the names of its parameters in order."""


def fits(writes: Sequence[Write]) -> bool:
    """Whether every write is a new task or a plain step of a running one (see the module doc)."""
    return all(
        (w.task_update is None) != (w.new_task is None)
        and w.folded_artifacts is None
        and w.task_metadata is None
        for w in writes
    )


def _statement(
    shape: tuple[tuple[str, tuple[str, ...]], ...], counts: bool, notify: bool, updates: bool
) -> tuple[str, tuple[str, ...]]:
    key = (shape, counts, notify, updates)
    stmt = _statements.get(key)
    if stmt is None:
        for table, cols in shape:
            unknown = set(cols) - set(Base.metadata.tables[table].c.keys())
            if unknown:
                raise ValueError(f"not columns of {table}: {sorted(unknown)}")
        parts = [_INSERT.format(table=t, cols=", ".join(cols)) for t, cols in shape]
        added = any(t == "push_configs" for t, _ in shape)
        if added:
            parts[-1] = parts[-1][:-1] + " RETURNING pk, task_id)"
        if counts:
            parts.append(_COUNT)
        if notify:
            parts.append(_NOTIFY.format(configs=_STORED_CONFIGS + (_ADDED_CONFIGS if added else "")))
        main = _UPDATE if updates else "SELECT 1"
        sql = "WITH " + ", ".join(parts) + " " + main if parts else main
        names = tuple(
            [t for t, _ in shape]
            + ["task_counts"] * counts
            + ["notifications"] * notify
            + ["updates"] * updates
        )
        for i, name in enumerate(names, 1):
            sql = sql.replace(f":{name}::text", f"${i}::text", 1)
        stmt = _statements[key] = (sql, names)
    return stmt


async def write(conn: asyncpg.Connection, writes: Sequence[Write], counts: list[dict[str, Any]]) -> bool:
    """The writes' rows, and the counter rows of their new tasks, in one statement on an autocommitting
    connection; False (nothing written) when rows of one table differ in their columns."""
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
    # One row per task, the last step's (as the writer's transaction does): a statement changes a row once.
    updates: dict[str, dict[str, Any]] = {}
    for w in writes:
        if w.new_task is not None:
            rows["tasks"].append(w.new_task)
        if w.task_update is not None:
            u = w.task_update
            updates[u["_id"]] = {"id": u["_id"], **{k: v for k, v in u.items() if k != "_id"}}
        rows["messages"] += w.messages
        rows["events"] += w.events
        rows["artifacts"] += w.artifacts
        rows["task_usage"] += w.usage
        if w.idempotency_key is not None:
            rows["idempotency_keys"].append(w.idempotency_key)
        rows["push_configs"] += w.push_configs
    shape = []
    params: dict[str, str] = {}
    for table, table_rows in rows.items():
        if not table_rows:
            continue
        cols = tuple(table_rows[0])
        if any(len(r) != len(cols) or r.keys() != table_rows[0].keys() for r in table_rows):
            return False
        shape.append((table, cols))
        params[table] = orjson.dumps(table_rows).decode()
    if counts:
        params["task_counts"] = orjson.dumps(counts).decode()
    notifications = [n for w in writes for n in w.notifications]
    if notifications:
        params["notifications"] = orjson.dumps(notifications).decode()
    if updates:
        params["updates"] = orjson.dumps(list(updates.values())).decode()
    sql, names = _statement(tuple(shape), bool(counts), bool(notifications), bool(updates))
    try:
        await conn.execute(sql, *(params[n] for n in names))
    except asyncpg.IntegrityConstraintViolationError as exc:
        raise IntegrityError(sql, None, exc) from exc
    return True
