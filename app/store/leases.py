"""Leases: which replica may write a task (and runs its agent), until when.

The queue is the `tasks` table itself: a `submitted` task nobody holds is waiting to be claimed. Claims use
`FOR UPDATE SKIP LOCKED` on PostgreSQL so replicas never claim the same task; SQLite serialises writers.

An expired lease is not yet a dead holder: leases also expire while the database is away, and the holder
renews them once it is back, at a moment other replicas cannot see. So a held lease is taken from its
holder by a reaper or a claim only once it is *void*: a reaper marked it expired (`suspect`, with the
database answering) and a whole lease TTL has passed since without the holder renewing it or committing
(either clears the mark). Requests (`take`) may still take an expired lease: the holder finds out
(`renew` leaves it out) and stops its run.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import ColumnElement, and_, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import TaskState, utcnow

from .models import ENDED_STATES
from .tables import tasks as _tasks


@dataclass(slots=True, frozen=True)
class Held:
    task_id: str
    state: TaskState
    owner: str
    started: bool = False
    """A run of it was started (`run_started_at`): a `submitted` task so held is lost with its holder."""

    @property
    def running(self) -> bool:
        """Its holder was running it: `working`, or `submitted` with a run started. Lost with the holder,
        never started again."""
        return self.state is TaskState.WORKING or (self.state is TaskState.SUBMITTED and self.started)


@dataclass(slots=True, frozen=True)
class Seized:
    """A lease a reaper has taken from a holder that left it void, and the task's last event then."""

    task_id: str
    last_seq: int


class Leases:
    def __init__(
        self,
        engine: AsyncEngine,
        replica_id: str,
        ttl_s: float,
        role: str | None = None,
        runs_once: bool = True,
    ) -> None:
        """With `role` (a deployment of several roles), claims, takes and reaping see only that role's
        tasks: each role's runner claims its own work, and a request on a role's endpoints takes only its
        tasks. `runs_once` (an agent with effects; False for a `pure` one): a claim marks the run started
        (`run_started_at`), committed before the agent starts, so a holder that dies after it leaves a task
        to end as lost rather than one to claim and run again."""
        self.runs_once = runs_once
        self._engine = engine
        self.replica_id = replica_id
        self._role_name = role
        self._role = _tasks.c.role == role if role is not None else true()
        self.ttl_s = ttl_s
        self.ttl = timedelta(seconds=ttl_s)
        self._pg = engine.dialect.name == "postgresql"

    def for_holder(self, holder: str) -> Leases:
        """The same role's leases as another holder takes them: a remote worker's, which the replica it calls
        claims and renews for it. Its claims mark the run started (`runs_once`): the replica does not know
        the worker's agent, so its run is taken to have effects."""
        return Leases(self._engine, holder, self.ttl_s, self._role_name, runs_once=True)

    def expiry(self, now: datetime | None = None) -> datetime:
        return (now or utcnow()) + self.ttl

    def _void(self, now: datetime) -> ColumnElement[bool]:
        """A held lease its holder has left: expired, marked so with the database answering, and still not
        renewed a lease TTL after that mark."""
        return and_(
            _tasks.c.lease_expires_at < now,
            _tasks.c.lease_suspect_at.is_not(None),
            _tasks.c.lease_suspect_at < now - self.ttl,
        )

    async def claim_queued(self, limit: int) -> list[str]:
        """Claim up to `limit` queued tasks, oldest first; their ids."""
        if limit <= 0:
            return []
        now = utcnow()
        free = and_(
            _tasks.c.state == TaskState.SUBMITTED.value,
            or_(_tasks.c.lease_owner.is_(None), self._void(now)),
            _tasks.c.run_started_at.is_(None),
        )
        # A `working` task nobody holds was handed on from its checkpoint (`tasks/resume.py`), or, with
        # several roles, answered on a replica that does not run its role: a runner of the role goes on with
        # it (a `working` task with a void lease is the reaper's).
        resumable = and_(_tasks.c.state == TaskState.WORKING.value, _tasks.c.lease_owner.is_(None))
        free = or_(free, resumable)
        pick = select(_tasks.c.id).where(self._role, free).order_by(_tasks.c.created_at).limit(limit)
        if self._pg:
            pick = pick.with_for_update(skip_locked=True)
        # Picked once: as a subquery of the IN, PostgreSQL may scan it again for the update's next row, and
        # a rescan skips the rows this statement has already updated and locks the next ones: more than
        # `limit` claimed (seen: 2 of limit 1). A materialized CTE is read once.
        picked = pick.cte("picked").prefix_with("MATERIALIZED", dialect="postgresql")
        stmt = (
            update(_tasks)
            .where(_tasks.c.id.in_(select(picked.c.id)), free)
            .values(
                lease_owner=self.replica_id,
                lease_expires_at=self.expiry(now),
                lease_suspect_at=None,
                run_started_at=now if self.runs_once else None,
            )
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            return list((await conn.execute(stmt)).scalars())

    async def take(self, task_id: str, *, owner: str | None = None) -> bool:
        """Take one unfinished task's lease unless another replica holds it alive.

        With `owner`, only that principal's task: a call for someone else's task changes nothing.
        """
        return (await self.take_from(task_id, owner=owner)) is not False

    async def take_queued(self, task_id: str) -> bool:
        """Take a queued task nobody has claimed (`queued_before`'s), to refuse it: never one a holder
        claimed, however expired its lease (a live worker may be slow to renew it while its run goes on)."""
        stmt = (
            update(_tasks)
            .where(
                _tasks.c.id == task_id,
                self._role,
                _tasks.c.state == TaskState.SUBMITTED.value,
                _tasks.c.lease_owner.is_(None),
                _tasks.c.run_started_at.is_(None),
            )
            .values(lease_owner=self.replica_id, lease_expires_at=self.expiry(), lease_suspect_at=None)
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).first() is not None

    async def take_from(
        self, task_id: str, *, owner: str | None = None, force: bool = False
    ) -> str | Literal[False] | None:
        """`take`, telling from whom: False when not taken, else the replica whose expired lease this
        replaced (None when nobody held it, or this replica did), which must stop its run.

        With `force` (an administrator's cancel that cannot reach the holder), a live lease is taken too:
        the holder's next commit collides with the event numbers written here, and its heartbeat no longer
        renews the lease, so either stops its run."""
        now = utcnow()
        free = or_(
            _tasks.c.lease_owner.is_(None),
            _tasks.c.lease_owner == self.replica_id,
            _tasks.c.lease_expires_at < now,
        )
        row = _tasks.c.id == task_id, _tasks.c.owner == owner if owner is not None else true(), self._role
        before = select(_tasks.c.lease_owner).where(*row)
        if self._pg:
            before = before.with_for_update()
        stmt = (
            update(_tasks)
            .where(
                *row,
                _tasks.c.state.not_in(ENDED_STATES),
                true() if force else free,
            )
            .values(lease_owner=self.replica_id, lease_expires_at=self.expiry(now), lease_suspect_at=None)
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            previous = (await conn.execute(before)).scalar()
            if (await conn.execute(stmt)).first() is None:
                return False
        return None if previous == self.replica_id else previous

    async def seize(self, held: Held) -> Seized | None:
        """Take a running task's lease (`Held.running`) from `held.owner` for a reaper, only if that holder
        left it void; with the task's last event number as of the take, so that a holder that commits after
        it makes the reaper's write collide instead of ending a task that was alive."""
        now = utcnow()
        running = or_(
            _tasks.c.state == TaskState.WORKING.value,
            and_(_tasks.c.state == TaskState.SUBMITTED.value, _tasks.c.run_started_at.is_not(None)),
        )
        stmt = (
            update(_tasks)
            .where(
                _tasks.c.id == held.task_id,
                _tasks.c.lease_owner == held.owner,
                running,
                self._void(now),
            )
            .values(lease_owner=self.replica_id, lease_expires_at=self.expiry(now), lease_suspect_at=None)
            .returning(_tasks.c.last_seq)
        )
        async with self._engine.begin() as conn:
            last_seq = (await conn.execute(stmt)).scalar()
        return None if last_seq is None else Seized(held.task_id, last_seq)

    async def holder(self, task_id: str, *, owner: str) -> str | None:
        """The replica holding a live lease on the owner's task, if any."""
        stmt = select(_tasks.c.lease_owner).where(
            _tasks.c.id == task_id, _tasks.c.owner == owner, self._role, _tasks.c.lease_expires_at >= utcnow()
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(stmt)).scalar()

    async def renew(self, task_ids: Collection[str]) -> set[str]:
        """Heartbeat: extend this replica's leases on the given unfinished tasks, the runs alive here; the
        ids renewed. One left out was ended or taken over elsewhere: its run must stop.

        Only those: a task whose run died in this process (or never started) must see its lease expire,
        so the reaper (here or on another replica) ends it instead of it staying `working` for good.
        """
        if not task_ids:
            return set()
        stmt = (
            update(_tasks)
            .where(
                _tasks.c.id.in_(list(task_ids)),
                _tasks.c.lease_owner == self.replica_id,
                _tasks.c.state.not_in(ENDED_STATES),
            )
            .values(lease_expires_at=self.expiry(), lease_suspect_at=None)
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            return set((await conn.execute(stmt)).scalars())

    async def recorded(self, task_id: str) -> tuple[int, str | None] | None:
        """The task's last event number and lease holder as stored: whether a commit whose answer was
        lost with the connection did land."""
        stmt = select(_tasks.c.last_seq, _tasks.c.lease_owner).where(_tasks.c.id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else (row[0], row[1])

    async def release(self, task_ids: list[str]) -> None:
        """Give up leases: the tasks become claimable (queued) or answerable by any replica."""
        if not task_ids:
            return
        stmt = (
            update(_tasks)
            .where(_tasks.c.id.in_(task_ids), _tasks.c.lease_owner == self.replica_id)
            .values(lease_owner=None, lease_expires_at=None, lease_suspect_at=None, run_started_at=None)
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt)

    async def suspect(self) -> int:
        """Mark the held leases found expired now, with the database answering: each holder has a lease TTL
        from here to renew (or commit) before its lease is void. How many were marked."""
        now = utcnow()
        stmt = (
            update(_tasks)
            .where(
                self._role,
                _tasks.c.lease_owner.is_not(None),
                _tasks.c.lease_expires_at < now,
                _tasks.c.lease_suspect_at.is_(None),
                _tasks.c.state.not_in(ENDED_STATES),
            )
            .values(lease_suspect_at=now)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount

    async def expired(self, limit: int = 100) -> list[Held]:
        """Unfinished tasks whose holder left its lease void (it died, hung, or stayed cut off for a
        lease TTL after the database was back)."""
        stmt = (
            select(_tasks.c.id, _tasks.c.state, _tasks.c.lease_owner, _tasks.c.run_started_at)
            .where(
                self._role,
                _tasks.c.lease_owner.is_not(None),
                self._void(utcnow()),
                _tasks.c.state.not_in(ENDED_STATES),
            )
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            Held(tid, TaskState(state), owner, started is not None) for tid, state, owner, started in rows
        ]

    async def queued_before(self, age: timedelta, limit: int = 100) -> list[str]:
        """Queued tasks nobody has claimed for `age` (oldest first)."""
        stmt = (
            select(_tasks.c.id)
            .where(
                self._role,
                _tasks.c.state == TaskState.SUBMITTED.value,
                _tasks.c.lease_owner.is_(None),
                _tasks.c.created_at < utcnow() - age,
            )
            .order_by(_tasks.c.created_at)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return list((await conn.execute(stmt)).scalars())

    async def mine(self) -> list[Held]:
        """Unfinished tasks leased to this replica's name: after a restart, left by the previous life."""
        stmt = select(_tasks.c.id, _tasks.c.state, _tasks.c.lease_owner, _tasks.c.run_started_at).where(
            self._role, _tasks.c.lease_owner == self.replica_id, _tasks.c.state.not_in(ENDED_STATES)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            Held(tid, TaskState(state), owner, started is not None) for tid, state, owner, started in rows
        ]
