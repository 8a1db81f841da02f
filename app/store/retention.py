"""Retention: deleting ended tasks past their age with every row that hangs off them, a small batch per
transaction; and finding the tasks left waiting for input (or auth) past theirs.

A task's age is the time of its last status (`status_at`, the time it ended), never its creation. One
batch is one transaction over at most `BATCH_TASKS` tasks and about `BATCH_ROWS` events: the tasks are
picked oldest first by `ix_tasks_status_at`, locked with `FOR UPDATE SKIP LOCKED` on PostgreSQL (so two
pruners never wait on each other, and a row some other transaction holds is left for the next pass), then
their push outbox rows, webhooks, Idempotency-Keys, events, artifacts and history go, each by its index on
`task_id`, then the tasks, and the counters ListTasks' totalSize reads (`task_counts`) are decremented by
what was deleted. The order matches the push deliverer's (outbox rows before their webhook) and the
writer's (counters last, in key order), so a batch cannot deadlock with them. A task with more events than
a batch takes is trimmed first, a chunk of its events per transaction, newest first.

`task_usage` is kept: it is the account of what agent runs used, with no foreign key to the task, and
`GET /usage` sums it by day. `agent_instances` has nothing to do with tasks.

Which process prunes: `turn` takes a PostgreSQL advisory lock on a connection of its own for the pass, so
one replica prunes at a time (a replica that finds it taken skips its pass); SQLite is one process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    and_,
    bindparam,
    case,
    delete,
    func,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.protocol.model import INTERRUPTED_STATES, iso

from .models import ENDED_STATES
from .tables import (
    artifacts as _artifacts,
    events as _events,
    idempotency_keys as _keys,
    messages as _messages,
    push_configs as _configs,
    push_outbox as _outbox,
    task_counts as _counts,
    tasks as _tasks,
)

BATCH_TASKS = 500
"""Most tasks one transaction deletes."""
BATCH_ROWS = 20_000
"""About the most events one transaction deletes (each task counts its `last_seq`); a task with more than
this alone has its events deleted a chunk this size per transaction first."""
LOCK_KEY = 0x4132_4152_4554
"""The PostgreSQL advisory lock one pruning pass holds ("A2ARET")."""

TABLES = (
    "tasks",
    "messages",
    "artifacts",
    "events",
    "push_configs",
    "push_outbox",
    "idempotency_keys",
    "task_counts",
)
"""What a prune reports, per table (`task_counts`: counter rows removed once they reached zero)."""

_WAITING = [s.value for s in INTERRUPTED_STATES]


@dataclass(slots=True, frozen=True)
class Waiting:
    """A task left waiting for input or auth: who owns it and which role's service may cancel it."""

    task_id: str
    owner: str
    role: str


def _ended_before(cutoff: datetime) -> ColumnElement[bool]:
    return and_(_tasks.c.status_at < iso(cutoff), _tasks.c.state.in_(ENDED_STATES))


class Pruning:
    """Deletes ended tasks older than a cutoff, in batches; finds waiting tasks older than one."""

    def __init__(
        self, engine: AsyncEngine, batch_tasks: int = BATCH_TASKS, batch_rows: int = BATCH_ROWS
    ) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self.batch_tasks = batch_tasks
        self.batch_rows = batch_rows
        self._trimmed: set[str] = set()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[bool]:
        """Whether this process may prune now: True unless another holds the pass (PostgreSQL's advisory
        lock, held on a connection of its own until the block ends; SQLite: always)."""
        if not self._pg:
            yield True
            return
        async with self._engine.connect() as conn:
            got = bool((await conn.execute(select(func.pg_try_advisory_lock(LOCK_KEY)))).scalar())
            await conn.commit()
            try:
                yield got
            finally:
                if got:
                    try:
                        await conn.execute(select(func.pg_advisory_unlock(LOCK_KEY)))
                        await conn.commit()
                    except BaseException:
                        # A pooled connection must never keep the lock: drop it (and the lock with it).
                        await conn.invalidate()
                        raise

    async def prune(
        self, cutoff: datetime, pause_s: float = 0.0, on_batch: Callable[[Counter[str]], None] | None = None
    ) -> Counter[str]:
        """Delete every task that ended before `cutoff`, batch after batch (`pause_s` between them, so
        the writers' transactions go first); the rows deleted per table. `on_batch` sees each batch's."""
        total: Counter[str] = Counter()
        while (done := await self.batch(cutoff)) is not None:
            total.update(done)
            if on_batch is not None:
                on_batch(done)
            if pause_s:
                await asyncio.sleep(pause_s)
        self._trimmed.clear()
        return total

    async def batch(self, cutoff: datetime) -> Counter[str] | None:
        """Delete one batch of tasks that ended before `cutoff`, with their rows; the rows deleted per
        table, or None when none is left."""
        async with self._engine.begin() as conn:
            pick = (
                select(_tasks.c.id, _tasks.c.last_seq)
                .where(_ended_before(cutoff))
                .order_by(_tasks.c.status_at, _tasks.c.id)
                .limit(self.batch_tasks)
            )
            if self._pg:
                pick = pick.with_for_update(skip_locked=True)
            found = (await conn.execute(pick)).all()
            if not found:
                return None
            ids: list[str] = []
            weight = 0
            for task_id, last_seq in found:
                if ids and weight + last_seq > self.batch_rows:
                    break
                ids.append(task_id)
                weight += last_seq
            big = ids[0] if weight > self.batch_rows and ids[0] not in self._trimmed else None
            if big is None:
                return await _delete(conn, ids)
        return await self._trim(big, found[0][1])

    async def _trim(self, task_id: str, last_seq: int) -> Counter[str]:
        """Delete a big ended task's events a chunk per transaction, newest first; the task itself goes
        with its next batch. The events deleted."""
        out: Counter[str] = Counter()
        hi = last_seq
        while hi > 0:
            lo = max(0, hi - self.batch_rows)
            chunk = delete(_events).where(
                _events.c.task_id == task_id, _events.c.seq > lo, _events.c.seq <= hi
            )
            async with self._engine.begin() as conn:
                out["events"] += (await conn.execute(chunk)).rowcount or 0
            hi = lo
        self._trimmed.add(task_id)
        return out

    async def count(self, cutoff: datetime) -> Counter[str]:
        """What pruning at `cutoff` would delete now, per table (but `task_counts`): a dry run."""
        ids = select(_tasks.c.id).where(_ended_before(cutoff))
        queries = {"tasks": select(func.count()).select_from(_tasks).where(_ended_before(cutoff))}
        for table, (rows, where) in _rows_of(ids).items():
            queries[table] = select(func.count()).select_from(rows).where(where)
        out: Counter[str] = Counter()
        async with self._engine.connect() as conn:
            for table, query in queries.items():
                out[table] = int((await conn.execute(query)).scalar_one())
        return out

    async def contexts(
        self, keys: Sequence[tuple[str, str]], role: str | None = None
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """Of the contexts `keys` ((owner, context id)), those with tasks left (of `role` only, when given:
        a remote worker's question): how many have not ended and the time of the last status (the
        workspace sweep's question; `ix_tasks_owner_context_status_at` serves it)."""
        if not keys:
            return {}
        open_ = case((_tasks.c.state.in_(ENDED_STATES), 0), else_=1)
        query = (
            select(_tasks.c.owner, _tasks.c.context_id, func.sum(open_), func.max(_tasks.c.status_at))
            .where(tuple_(_tasks.c.owner, _tasks.c.context_id).in_(list(keys)))
            .group_by(_tasks.c.owner, _tasks.c.context_id)
        )
        if role is not None:
            query = query.where(_tasks.c.role == role)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {(owner, context): (int(n), str(last)) for owner, context, n, last in rows}

    async def waiting_before(self, cutoff: datetime, limit: int = 100) -> list[Waiting]:
        """Tasks waiting for input or auth since before `cutoff` (oldest first), every role's."""
        query = (
            select(_tasks.c.id, _tasks.c.owner, _tasks.c.role)
            .where(_tasks.c.state.in_(_WAITING), _tasks.c.status_at < iso(cutoff))
            .order_by(_tasks.c.status_at, _tasks.c.id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [Waiting(*r) for r in (await conn.execute(query)).all()]


def _rows_of(ids: Any) -> dict[str, tuple[FromClause, ColumnElement[bool]]]:
    """The rows that hang off the tasks `ids` (their ids, or a query of them), per table: what a batch
    deletes before the tasks, in this order (push outbox rows before their webhook, as the deliverer takes
    them), each by its index; the dry run counts the same rows."""
    configs = select(_configs.c.pk).where(_configs.c.task_id.in_(ids))
    rows = {"push_outbox": (_outbox, _outbox.c.config_pk.in_(configs))}
    for table in (_configs, _keys, _events, _artifacts, _messages):
        rows[table.name] = (table, table.c.task_id.in_(ids))
    return rows


async def _delete(conn: AsyncConnection, ids: list[str]) -> Counter[str]:
    """Delete the tasks `ids` and their rows, children first (no reliance on the foreign keys' cascades),
    and take them off the counters; the rows deleted per table."""
    out: Counter[str] = Counter()
    for table, (rows, where) in _rows_of(ids).items():
        out[table] = (await conn.execute(delete(rows).where(where))).rowcount or 0
    deleted = (
        await conn.execute(
            delete(_tasks).where(_tasks.c.id.in_(ids)).returning(_tasks.c.owner, _tasks.c.context_id)
        )
    ).all()
    out["tasks"] = len(deleted)
    out["task_counts"] = await _uncount(conn, [(r[0], r[1]) for r in deleted])
    return out


_set_count = (
    update(_counts)
    .where(
        _counts.c.owner == bindparam("_owner"),
        _counts.c.context_id == bindparam("_context"),
        _counts.c.shard == bindparam("_shard"),
    )
    .values(n=bindparam("_n"))
)
_drop_count = delete(_counts).where(
    _counts.c.owner == bindparam("_owner"),
    _counts.c.context_id == bindparam("_context"),
    _counts.c.shard == bindparam("_shard"),
)


async def _uncount(conn: AsyncConnection, deleted: list[tuple[str, str]]) -> int:
    """Take deleted tasks off their owner's and context's counters (the writer's shards, locked in key order
    as the writer takes them); a counter row that reaches zero is deleted. The counter rows deleted."""
    if not deleted:
        return 0
    left: Counter[tuple[str, str]] = Counter()
    for owner, context_id in deleted:
        left[(owner, "")] += 1
        left[(owner, context_id)] += 1
    keys = sorted(left)
    query = (
        select(_counts.c.owner, _counts.c.context_id, _counts.c.shard, _counts.c.n)
        .where(tuple_(_counts.c.owner, _counts.c.context_id).in_(keys))
        .order_by(_counts.c.owner, _counts.c.context_id, _counts.c.shard)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    changed: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for owner, context_id, shard, n in (await conn.execute(query)).all():
        take = min(max(n, 0), left[(owner, context_id)])
        if take == 0:
            continue
        left[(owner, context_id)] -= take
        row = {"_owner": owner, "_context": context_id, "_shard": shard}
        if n == take:
            dropped.append(row)
        else:
            changed.append({**row, "_n": n - take})
    if changed:
        await conn.execute(_set_count, changed)
    if dropped:
        await conn.execute(_drop_count, dropped)
    return len(dropped)
