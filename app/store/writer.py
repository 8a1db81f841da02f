"""Group commit: every event is committed before it is published, many tasks share one transaction.

Callers hand a `Write` (`write.py`: the rows one step of one task produces) to `Writer.commit` and wait. A few
flushers each drain whatever has queued into one transaction, so under load a commit's round trips and
fsync are shared by many requests, while one flusher's commit is in flight the next batch is already
being written, and an idle server still commits each write at once. Writes of one task never overlap (the
task service awaits each before the next), so concurrent flushers cannot reorder a task's rows. A batch
that breaks a constraint is retried write by write, so only the offending write fails. A batch that fails
because the database is away fails every write in it; retrying is the caller's choice (a run waits for
the database, a request answers at once). On PostgreSQL a batch of new tasks and running tasks' steps is
one autocommitted statement instead (`steps`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy import (
    Boolean,
    PrimaryKeyConstraint,
    UniqueConstraint,
    bindparam,
    case,
    delete,
    insert,
    literal,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.telemetry import traces

from . import sqlite_steps, steps
from .models import (
    ARTIFACT_SEQ_PKEY,
    EVENT_SEQ_PKEY,
    IDEMPOTENCY_KEY_PKEY,
    OPEN_CONTEXT_UNIQUE,
    RETRY_KEY_UNIQUE,
    ArtifactRow,
    Base,
    EventRow,
    IdempotencyKeyRow,
    MessageRow,
    PushConfigRow,
    PushOutboxRow,
    TaskRow,
    TaskUsageRow,
)
from .outage import is_contention, is_unavailable
from .tables import push_configs as _configs, task_counts as _counts, tasks as _tasks
from .write import RUNNING, Write

log = logging.getLogger(__name__)

CONTENTION_TRIES = 3
"""A batch PostgreSQL aborted for a deadlock or a serialization failure is tried this many times in all."""

_update_task = (
    update(_tasks)
    .where(_tasks.c.id == bindparam("_id"))
    .values(
        state=bindparam("state"),
        status=bindparam("status"),
        transitions=bindparam("transitions"),
        last_seq=bindparam("last_seq"),
        updated_at=bindparam("updated_at"),
        status_at=bindparam("status_at"),
        lease_owner=bindparam("lease_owner"),
        lease_expires_at=bindparam("lease_expires_at"),
        # Any step of the task is its holder alive: a reaper's suspicion mark goes.
        lease_suspect_at=null(),
        # A retry of the first message attaches only while the task runs: the key goes when it stops.
        retry_key=case((bindparam("running", type_=Boolean()), _tasks.c.retry_key), else_=null()),
    )
)

_insert_task = insert(TaskRow)
_insert_message = insert(MessageRow)
_insert_event = insert(EventRow)
_insert_artifact = insert(ArtifactRow)
_insert_usage = insert(TaskUsageRow)
_insert_push_config = insert(PushConfigRow)
_insert_key = insert(IdempotencyKeyRow)
_delete_artifacts = delete(ArtifactRow).where(ArtifactRow.task_id == bindparam("_task_id"))

_update_metadata = (
    update(_tasks).where(_tasks.c.id == bindparam("_id")).values(metadata=bindparam("_metadata"))
)

# One notification per webhook the task has when the event commits: the webhooks are read inside the
# event's own transaction, so one registered on another replica a moment ago is not missed, and a deleted
# one gets nothing. A row points at the event; its body, in the webhook's version, is built at delivery.
_notify = insert(PushOutboxRow).from_select(
    ["config_pk", "seq", "history_len", "attempts", "created_at"],
    select(
        _configs.c.pk,
        bindparam("seq"),
        bindparam("history_len"),
        literal(0),
        bindparam("created_at", type_=PushOutboxRow.__table__.c.created_at.type),
    ).where(_configs.c.task_id == bindparam("task_id")),
)


COUNT_SHARDS = 8
"""Rows per counter: flushers (of all replicas) add to different ones, so they rarely wait on each other."""


def _count_upsert(dialect: str) -> Any:
    """Add `n` to a counter row, creating it if needed (both dialects have ON CONFLICT DO UPDATE)."""
    stmt = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_counts)
    return stmt.on_conflict_do_update(
        index_elements=[_counts.c.owner, _counts.c.context_id, _counts.c.shard],
        set_={"n": _counts.c.n + stmt.excluded.n},
    )


class ConflictError(Exception):
    """A row with the same key is already stored (a key no subclass names: a bug)."""


class DuplicateError(ConflictError):
    """A repeated request: a retry of a running task's first message, or an Idempotency-Key in use."""


class ContextTakenError(ConflictError):
    """Another open task holds the context of a new task of an agent with effects (`TaskRow.exclusive`)."""


class SeqTakenError(ConflictError):
    """The task's next event number is already written: another replica has taken the task over."""


_CONFLICTS: dict[str, type[ConflictError]] = {
    RETRY_KEY_UNIQUE: DuplicateError,
    IDEMPOTENCY_KEY_PKEY: DuplicateError,
    EVENT_SEQ_PKEY: SeqTakenError,
    ARTIFACT_SEQ_PKEY: SeqTakenError,
    OPEN_CONTEXT_UNIQUE: ContextTakenError,
}


def _unique_keys() -> dict[str, str]:
    """Each unique key's name by SQLite's naming of it ("table.col, table.col"), from the tables."""
    names: dict[str, str] = {}
    for table in Base.metadata.tables.values():
        for key in (*table.constraints, *table.indexes):
            unique = isinstance(key, PrimaryKeyConstraint | UniqueConstraint) or getattr(key, "unique", False)
            if unique and isinstance(key.name, str):
                names[", ".join(f"{table.name}.{c.name}" for c in key.columns)] = key.name
    return names


_BY_COLUMNS = _unique_keys()
_SQLITE_UNIQUE = "UNIQUE constraint failed: "


def _conflict(exc: IntegrityError) -> ConflictError:
    """The conflict for the unique key `exc` broke, chosen by the key's name: asyncpg reports it
    (`constraint_name`), SQLite names the columns instead."""
    orig = exc.orig
    name = getattr(orig, "constraint_name", None) or getattr(
        getattr(orig, "__cause__", None), "constraint_name", None
    )
    if name is None:
        text = str(orig)
        if text.startswith(_SQLITE_UNIQUE):
            name = _BY_COLUMNS.get(text[len(_SQLITE_UNIQUE) :])
    return _CONFLICTS.get(name or "", ConflictError)(str(orig))


COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of the commit-time histogram's buckets; one more bucket above the last."""


@dataclass
class CommitTimes:
    """How long the group commits took (from taking a connection to the commit): a count per bucket of
    COMMIT_BUCKETS (and one above them) and the sum; read by the metrics."""

    bounds: tuple[float, ...] = COMMIT_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_BUCKETS) + 1))
    seconds: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.seconds += seconds


class Writer:
    def __init__(self, engine: AsyncEngine, max_batch: int = 512, flushers: int = 3) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._flushers = flushers
        self._pending: list[tuple[Write, asyncio.Future[None]]] = []
        self._wake = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._busy = 0
        self._shard_base = random.randrange(COUNT_SHARDS)
        self._count_upsert = _count_upsert(engine.dialect.name)
        self._autocommit = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if engine.dialect.name == "postgresql"
            else None
        )
        """PostgreSQL: a batch that `steps.fits` goes in one autocommitted statement."""
        self._sqlite = engine.dialect.name == "sqlite"
        """SQLite: a batch is one transaction in one trip to the connection's thread (`sqlite_steps`)."""
        self._held: dict[int, tuple[AsyncConnection, asyncpg.Connection]] = {}
        """Each flusher's autocommitting connection (with its driver connection), kept between batches: a
        pool checkout and return cost a third of the statement's own time."""
        self.commits = 0
        """Transactions committed, and the writes they carried (`writes`): read by the metrics."""
        self.writes = 0
        self.commit_times = CommitTimes()

    @property
    def pending(self) -> int:
        """Writes queued for the next commit."""
        return len(self._pending)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run((self._shard_base + i) % COUNT_SHARDS), name=f"store-writer-{i}")
            for i in range(self._flushers)
        ]

    async def stop(self) -> None:
        """Flush what is queued, then stop."""
        async with self._wake:
            await self._wake.wait_for(lambda: not self._pending and not self._busy)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for shard in list(self._held):
            held = self._held.pop(shard)
            await held[0].close()

    async def _held_connection(self, shard: int) -> asyncpg.Connection:
        """The driver (asyncpg) connection the flusher keeps checked out; a new one when it has none or the
        server closed it (a restart), as the pool's checkout refuses a closed one (`db._refuse_closed`)."""
        held = self._held.get(shard)
        if held is not None and (held[0].invalidated or held[1].is_closed()):
            await self._drop_held(shard)
            held = None
        if held is None:
            assert self._autocommit is not None
            conn = await self._autocommit.connect()
            try:
                driver = (await conn.get_raw_connection()).driver_connection
            except BaseException:
                await _close_quietly(conn)
                raise
            held = self._held[shard] = (conn, driver)
        return held[1]

    async def _drop_held(self, shard: int) -> None:
        """Forget the flusher's connection after a failure: it goes back to the pool as invalid (closed)."""
        held = self._held.pop(shard, None)
        if held is not None:
            await _close_quietly(held[0])

    async def commit(self, write: Write) -> None:
        """Return once `write` is durable; raise a ConflictError (DuplicateError, SeqTakenError) when a
        key is taken."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if traces.ENABLED:
            write.trace = traces.current_context()
        self._pending.append((write, fut))
        async with self._wake:
            self._wake.notify()
        await fut

    async def _run(self, shard: int) -> None:
        while True:
            async with self._wake:
                await self._wake.wait_for(lambda: bool(self._pending))
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                self._busy += 1
            try:
                if traces.ENABLED:
                    attributes = {"a2a.writes": len(batch)}
                    with traces.batch("store.commit", [w.trace for w, _ in batch], attributes):
                        await self._flush_batch(batch, shard)
                else:
                    await self._flush_batch(batch, shard)
            finally:
                # Not kept while this flusher waits for more: a finished task's folded artifacts (its
                # whole output) would stay in memory until the next write.
                batch = []
                async with self._wake:
                    self._busy -= 1
                    self._wake.notify_all()

    async def _flush_batch(self, batch: list[tuple[Write, asyncio.Future[None]]], shard: int) -> None:
        started = time.perf_counter()
        try:
            for attempt in range(1, CONTENTION_TRIES + 1):
                try:
                    await self._flush([w for w, _ in batch], shard)
                    break
                except Exception as exc:
                    # Two writers of one task (a cancel here, a remote worker's batch on another replica)
                    # can deadlock on its row and an event number; PostgreSQL aborts one of them whole.
                    if attempt == CONTENTION_TRIES or not is_contention(exc):
                        raise
                    log.info("store write tried again after a deadlock", extra={"attempt": attempt})
        except IntegrityError as exc:
            if len(batch) == 1:
                _settle(batch[0][1], _conflict(exc))
                return
            for item in batch:
                await self._flush_batch([item], shard)
            return
        except Exception as exc:
            # A database that is away is the callers' to wait out (a run retries, a request answers 503);
            # anything else is a bug worth a traceback.
            if not is_unavailable(exc):
                log.exception("store write failed")
            for _, fut in batch:
                _settle(fut, exc)
            return
        self.commit_times.observe(time.perf_counter() - started)
        self.commits += 1
        self.writes += len(batch)
        for _, fut in batch:
            _settle(fut, None)

    async def _flush(self, writes: list[Write], shard: int) -> None:
        new_tasks = [w.new_task for w in writes if w.new_task is not None]
        if self._autocommit is not None and steps.fits(writes):
            driver = await self._held_connection(shard)
            try:
                if await steps.write(driver, writes, _count_rows(new_tasks, shard)):
                    return
            except IntegrityError:
                raise  # a taken key: the statement failed whole, the connection is fine
            except BaseException:
                await self._drop_held(shard)
                raise
        plan = self._plan(writes, new_tasks, shard)
        if self._sqlite:
            await sqlite_steps.write(self._engine, plan)
            return
        async with self._engine.begin() as conn:
            for stmt, rows in plan:
                if rows:
                    await conn.execute(stmt, rows)

    def _plan(self, writes: list[Write], new_tasks: list[dict[str, Any]], shard: int) -> sqlite_steps.Plan:
        """The transaction of `writes`: each statement in order, with its rows."""
        updates: dict[str, dict[str, Any]] = {}
        for w in writes:
            if w.task_update is not None:
                u = w.task_update
                updates[u["_id"]] = {**u, "running": u["state"] in RUNNING}
        metadata = {w.task_metadata["_id"]: w.task_metadata for w in writes if w.task_metadata}
        plan: sqlite_steps.Plan = [
            (_insert_task, new_tasks),
            (_insert_message, [m for w in writes for m in w.messages]),
            (_insert_event, [e for w in writes for e in w.events]),
            (_insert_artifact, [a for w in writes for a in w.artifacts]),
            (_update_task, list(updates.values())),
            (_update_metadata, list(metadata.values())),
            (_insert_usage, [u for w in writes for u in w.usage]),
            (_insert_push_config, [c for w in writes for c in w.push_configs]),
            (_notify, [n for w in writes for n in w.notifications]),
            (_insert_key, [w.idempotency_key for w in writes if w.idempotency_key is not None]),
        ]
        for w in writes:
            if w.folded_artifacts is not None and (row := w.task_update or w.new_task) is not None:
                # A finished task's artifact chunks replaced by its folded artifacts.
                plan.append((_delete_artifacts, [{"_task_id": row.get("_id") or row["id"]}]))
                plan.append((_insert_artifact, w.folded_artifacts))
        if new_tasks:
            # Last, and in key order: a row lock taken here is held only until the commit that follows,
            # and two flushers take them in the same order, so they cannot deadlock.
            plan.append((self._count_upsert, _count_rows(new_tasks, shard)))
        return plan


def _count_rows(new_tasks: list[dict[str, Any]], shard: int) -> list[dict[str, Any]]:
    """What the new tasks add to their owner's counters (all, and the context's), in key order."""
    counts = Counter((t["owner"], c) for t in new_tasks for c in ("", t["context_id"]))
    return [{"owner": o, "context_id": c, "shard": shard, "n": n} for (o, c), n in sorted(counts.items())]


async def _close_quietly(conn: AsyncConnection) -> None:
    """Invalidate a kept connection (its state after a failure is unknown): the pool closes it."""
    try:
        await conn.invalidate()
    except Exception:
        log.debug("closing a writer connection failed", exc_info=True)


def _settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
