"""The delivery outbox in the database: which webhook queues are due, who delivers each, what happened.

Notifications are rows of `push_outbox`, written in the same transaction as the event they are about (the
group-commit writer), so a committed event always has its notifications and a rolled-back one none. A
replica claims whole webhooks (`push_configs` rows), never single notifications: the claim holder delivers
that webhook's queue in event order, one call at a time. Claims use `FOR UPDATE SKIP LOCKED` on PostgreSQL
(SQLite serialises writers) and expire: a replica that dies mid-delivery stops renewing, and another takes
the queue over, so nothing is lost (a notification may arrive twice: delivery is at least once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Executable,
    Select,
    String,
    Update,
    and_,
    any_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnClause

from app.protocol.events import Event, event_from_store
from app.protocol.model import utcnow
from app.store.tables import (
    events as _events,
    messages as _messages,
    push_configs as _configs,
    push_outbox as _outbox,
    tasks as _tasks,
)

from .payloads import V03, View, Views


@dataclass(slots=True, frozen=True)
class Hook:
    """A claimed webhook: where and how to call it."""

    pk: int
    task_id: str
    config_id: str
    version: str
    url: str
    token: str | None
    scheme: str | None
    credentials: str | None


@dataclass(slots=True, frozen=True)
class Pending:
    """A queued notification with what its body is built from (`app.push.payloads`)."""

    id: int
    seq: int
    attempts: int
    event: Event | None
    """The event it is about (None: no longer in the log)."""
    history_len: int | None
    body: dict[str, Any] | None = None
    """The body stored with rows queued before bodies were built at delivery."""
    view: View | None = None
    """A v0.3 webhook's folded task, shared by its queue's rows."""
    traceparent: str | None = None
    """The trace context of the request that created the task: the call's span continues it."""


@dataclass(slots=True)
class Tally:
    """Outcomes of a run of attempts on one webhook, added to its row in one update."""

    attempts: int = 0
    delivered: int = 0
    failed: int = 0
    last_outcome: str | None = None
    last_attempt_at: datetime | None = None
    last_delivered_at: datetime | None = None

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attempts": _configs.c.attempts + self.attempts,
            "delivered": _configs.c.delivered + self.delivered,
            "failed": _configs.c.failed + self.failed,
        }
        if self.last_outcome is not None:
            out["last_outcome"] = self.last_outcome[:512]
            out["last_attempt_at"] = self.last_attempt_at
        if self.last_delivered_at is not None:
            out["last_delivered_at"] = self.last_delivered_at
        return out


@dataclass(slots=True)
class Run:
    """A run of attempts on one webhook to settle: rows that left the queue, the tally, and the retry
    (row id, attempts, when) that holds the queue back, if any."""

    pk: int
    done: list[int]
    tally: Tally
    retry: tuple[int, int, datetime] | None = None

    def params(self) -> dict[str, Any]:
        t = self.tally
        return {
            "_pk": self.pk,
            "_attempts": t.attempts,
            "_delivered": t.delivered,
            "_failed": t.failed,
            "_outcome": None if t.last_outcome is None else t.last_outcome[:512],
            "_attempt_at": t.last_attempt_at,
            "_delivered_at": t.last_delivered_at,
            "_retry_at": None if self.retry is None else self.retry[2],
        }


_Ts = _configs.c.last_attempt_at.type
_add_tally = (
    update(_configs)
    .where(_configs.c.pk == bindparam("_pk"))
    .values(
        attempts=_configs.c.attempts + bindparam("_attempts"),
        delivered=_configs.c.delivered + bindparam("_delivered"),
        failed=_configs.c.failed + bindparam("_failed"),
        last_outcome=func.coalesce(bindparam("_outcome", type_=String), _configs.c.last_outcome),
        last_attempt_at=func.coalesce(bindparam("_attempt_at", type_=_Ts), _configs.c.last_attempt_at),
        last_delivered_at=func.coalesce(bindparam("_delivered_at", type_=_Ts), _configs.c.last_delivered_at),
        retry_at=bindparam("_retry_at", type_=_Ts),
        claimed_by=case((bindparam("_release", type_=Boolean), None), else_=_configs.c.claimed_by),
        claim_expires_at=case(
            (bindparam("_release", type_=Boolean), None), else_=_configs.c.claim_expires_at
        ),
    )
)
"""One webhook's tally added, and its claim given up (`_release`) when its queue is empty or held back
(executemany: one statement for every run of a group settle)."""


def _among(column: ColumnClause[Any], name: str, pg: bool) -> ColumnElement[bool]:
    """`column` is one of the list bound as `name`. On PostgreSQL one array parameter (`= ANY`), so the
    statement's text is the same whatever the list's length: prepared once per connection, where an
    expanding IN is a new statement (parsed, planned and cached by the driver) per length. SQLite has no
    arrays: the expanding IN there."""
    if pg:
        item = BigInteger() if isinstance(column.type, BigInteger) else column.type
        return column == any_(bindparam(name, type_=ARRAY(item)))
    return column.in_(bindparam(name, expanding=True))


def _claim_statement(pg: bool) -> Update:
    """The outbox's claim of webhooks (`_Statements.claim`)."""
    now = bindparam("now", type_=_Ts)
    free = or_(_configs.c.claimed_by.is_(None), _configs.c.claim_expires_at < now)
    due = or_(_configs.c.retry_at.is_(None), _configs.c.retry_at <= now)
    pick = (
        select(_configs.c.pk)
        .where(free, due, _configs.c.pk.in_(select(_outbox.c.config_pk)))
        .limit(bindparam("limit"))
    )
    if pg:
        # NO KEY UPDATE: the outbox rows being inserted meanwhile hold KEY SHARE locks on their
        # webhook (the foreign key); a plain FOR UPDATE would make the event writes wait.
        pick = pick.with_for_update(skip_locked=True, of=_configs, key_share=True)
    return (
        update(_configs)
        .where(_configs.c.pk.in_(pick.scalar_subquery()), free)
        .values(claimed_by=bindparam("replica"), claim_expires_at=bindparam("expires"), retry_at=None)
        .returning(
            _configs.c.pk,
            _configs.c.task_id,
            _configs.c.config_id,
            _configs.c.version,
            _configs.c.url,
            _configs.c.token,
            _configs.c.auth_scheme,
            _configs.c.auth_credentials,
        )
    )


def _heads_statement(pg: bool) -> Select[Any]:
    """The outbox's read of each claimed webhook's first notifications (`_Statements.heads`)."""
    rank = (
        func.row_number()
        .over(partition_by=_outbox.c.config_pk, order_by=(_outbox.c.seq, _outbox.c.id))
        .label("rank")
    )
    ranked = (
        select(
            _outbox.c.config_pk,
            _outbox.c.id,
            _outbox.c.seq,
            _outbox.c.body,
            _outbox.c.history_len,
            _outbox.c.attempts,
            rank,
        )
        .where(_among(_outbox.c.config_pk, "pks", pg))
        .subquery()
    )
    return (
        select(
            ranked,
            _configs.c.version,
            _configs.c.task_id,
            _tasks.c.context_id,
            _tasks.c.metadata.label("task_metadata"),
            _tasks.c.traceparent,
            _events.c.kind,
            _events.c.body.label("event"),
        )
        .select_from(
            ranked.join(_configs, _configs.c.pk == ranked.c.config_pk)
            .join(_tasks, _tasks.c.id == _configs.c.task_id)
            .outerjoin(_events, and_(_events.c.task_id == _configs.c.task_id, _events.c.seq == ranked.c.seq))
        )
        .where(ranked.c.rank <= bindparam("batch"))
        .order_by(ranked.c.config_pk, ranked.c.rank)
    )


class _Statements:
    """The outbox's statements for one dialect, built once: each has a fixed shape (a list is bound as one
    parameter, `_among`), so SQLAlchemy compiles it once and PostgreSQL prepares it once."""

    def __init__(self, pg: bool) -> None:
        self.claim = _claim_statement(pg)
        """Claim up to :limit webhooks that are free, due and have notifications waiting."""
        self.heads = _heads_statement(pg)
        """The first :batch notifications of each webhook in :pks, in order, each with its event."""
        self.events = (
            select(_events.c.task_id, _events.c.seq, _events.c.kind, _events.c.body)
            .where(
                _among(_events.c.task_id, "tids", pg),
                _events.c.seq > bindparam("lo"),
                _events.c.seq <= bindparam("hi"),
            )
            .order_by(_events.c.task_id, _events.c.seq)
        )
        """Events of some tasks in a range of seqs: what v0.3 views lack (a cold start, a gap)."""
        self.messages = (
            select(_messages.c.task_id, _messages.c.id, _messages.c.body)
            .where(_among(_messages.c.task_id, "tids", pg), _messages.c.id > bindparam("after"))
            .order_by(_messages.c.task_id, _messages.c.id)
        )
        """Messages of some tasks after a row id: the history v0.3 views lack."""
        self.delete = delete(_outbox).where(_among(_outbox.c.id, "ids", pg))
        self.retry = update(_outbox).where(_outbox.c.id == bindparam("_id")).values(attempts=bindparam("_n"))
        mine = (_among(_configs.c.pk, "pks", pg), _configs.c.claimed_by == bindparam("replica"))
        self.renew = update(_configs).where(*mine).values(claim_expires_at=bindparam("expires"))
        self.give_up = update(_configs).where(*mine).values(claimed_by=None, claim_expires_at=None)
        """The claims this replica still holds among :pks renewed, or given up."""


class Outbox:
    def __init__(
        self, engine: AsyncEngine, replica_id: str, claim_ttl_s: float, async_commit: bool = False
    ) -> None:
        self._engine = engine
        self._async_commit = async_commit
        self.replica_id = replica_id
        self.ttl = timedelta(seconds=claim_ttl_s)
        self._pg = engine.dialect.name == "postgresql"
        self._sql = _Statements(self._pg)
        self.views = Views()

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction of the deliverer's bookkeeping. On PostgreSQL it commits without waiting for the
        WAL flush: losing its last moments in a database crash only re-sends a notification (delivery is
        at least once anyway) or frees a claim early, and the task's own commits no longer queue behind
        the deliverer's fsyncs, so a webhook costs the task's path nothing. An engine made for the
        deliverer has that set for its sessions (`async_commit`: `app.wiring` makes one with
        `create_engine(..., synchronous_commit=False)`); on another, each transaction sets it first, a
        round trip more."""
        async with self._engine.begin() as conn:
            if self._pg and not self._async_commit:
                await conn.execute(text("SET LOCAL synchronous_commit = off"))
            yield conn

    async def claim(self, limit: int, batch: int) -> list[tuple[Hook, list[Pending]]]:
        """Claim up to `limit` webhooks that have notifications waiting and are not held back; each
        with its first `batch` notifications (one transaction for all)."""
        if limit <= 0:
            return []
        now = utcnow()
        params = {"now": now, "limit": limit, "replica": self.replica_id, "expires": now + self.ttl}
        async with self._begin() as conn:
            hooks = [Hook(*r) for r in (await conn.execute(self._sql.claim, params)).all()]
            if not hooks:
                return []
            queued = await self._heads(conn, [h.pk for h in hooks], batch)
        return [(h, queued[h.pk]) for h in hooks]

    async def _heads(self, conn: AsyncConnection, pks: list[int], batch: int) -> dict[int, list[Pending]]:
        """The first `batch` notifications of each webhook in `pks`, in order, each with its event (one
        query for all), and for v0.3 webhooks what their views lack to fold up to them (two more)."""
        queued: dict[int, list[Pending]] = {pk: [] for pk in pks}
        if not pks:
            return queued
        views: dict[int, View] = {}
        for r in (await conn.execute(self._sql.heads, {"pks": pks, "batch": batch})).all():
            event = None if r.kind is None else event_from_store(r.task_id, r.context_id, r.kind, r.event)
            view = views.get(r.config_pk)
            if view is None and r.version == V03:
                view = self.views.for_queue(r.config_pk, r.task_id, r.context_id, r.task_metadata, r.seq)
                views[r.config_pk] = view
            if view is not None and event is not None and r.seq > view.seq:
                view.ahead.setdefault(r.seq, event)
            queued[r.config_pk].append(
                Pending(r.id, r.seq, r.attempts, event, r.history_len, r.body, view, r.traceparent)
            )
        if views:
            await self._fill(conn, views, queued)
        return queued

    async def _fill(
        self, conn: AsyncConnection, views: dict[int, View], queued: dict[int, list[Pending]]
    ) -> None:
        """Read the events and messages the v0.3 views lack for their queues: one query each for all, and
        none at all in the usual case (a view already folded up to its queue, no new messages). Both
        statements have a fixed shape (an expanding IN and one range), so they compile once; rows another
        view already had are dropped here."""
        gaps = [v for pk, v in views.items() if v.missing(queued[pk][-1].seq)]
        if gaps:
            hi = max(queued[pk][-1].seq for pk, v in views.items() if v in gaps)
            rows = await conn.execute(
                self._sql.events,
                {"tids": sorted({v.task_id for v in gaps}), "lo": min(v.seq for v in gaps), "hi": hi},
            )
            read: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
            for tid, seq, kind, body in rows.all():
                read.setdefault(tid, []).append((seq, kind, body))
            for view in gaps:
                for seq, kind, body in read.get(view.task_id, ()):
                    if seq > view.seq and seq not in view.ahead:
                        view.ahead[seq] = event_from_store(view.task_id, view.context_id, kind, body)
        short = [
            v for pk, v in views.items() if max(r.history_len or 0 for r in queued[pk]) > len(v.messages)
        ]
        if short:
            rows = await conn.execute(
                self._sql.messages,
                {"tids": sorted({v.task_id for v in short}), "after": min(v.last_message_id for v in short)},
            )
            got: dict[str, list[tuple[int, dict[str, Any]]]] = {}
            for tid, row_id, body in rows.all():
                got.setdefault(tid, []).append((row_id, body))
            for view in short:
                view.add_messages(got.get(view.task_id, ()))

    async def settle_many(self, runs: list[Run], batch: int) -> dict[int, list[Pending]]:
        """Record runs of attempts on many webhooks in one transaction and a fixed number of statements
        (group commit), and read each one's next notifications ([]: its claim was given up). A run's
        delivered or given-up rows leave the queue, its tally is added, a retry holds its queue back.
        The runs must be of distinct webhooks (each webhook has one run in flight at a time)."""
        done = [row_id for r in runs for row_id in r.done]
        retries = [r for r in runs if r.retry is not None]
        async with self._begin() as conn:
            if done:
                await conn.execute(self._sql.delete, {"ids": done})
            if retries:
                await conn.execute(
                    self._sql.retry,
                    [{"_id": r.retry[0], "_n": r.retry[1]} for r in retries if r.retry is not None],
                )
            following = await self._heads(conn, [r.pk for r in runs if r.retry is None], batch)
            tallies = []
            for r in runs:
                idle = not following.get(r.pk)
                if idle:
                    self.views.forget(r.pk)
                tallies.append({**r.params(), "_release": idle})
            await conn.execute(_add_tally, tallies)
        return {r.pk: following.get(r.pk, []) for r in runs}

    async def renew(self, pks: list[int]) -> None:
        """Heartbeat: keep the claims on the webhooks being delivered here."""
        if pks:
            await self._change_claims(self._sql.renew, {"pks": pks, "expires": utcnow() + self.ttl})

    async def release(self, pks: list[int]) -> None:
        """Give claims up (shutdown): another replica may deliver at once."""
        if pks:
            await self._change_claims(self._sql.give_up, {"pks": pks})

    async def _change_claims(self, stmt: Executable, params: dict[str, Any]) -> None:
        """Change the claims this replica still holds among the webhooks `params` names (one it lost
        stays lost)."""
        async with self._begin() as conn:
            await conn.execute(stmt, {**params, "replica": self.replica_id})
