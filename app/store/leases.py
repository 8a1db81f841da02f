"""Leases: which replica may write a task (and runs its agent), until when.

The queue is the `tasks` table itself: a `submitted` task nobody holds is waiting to be claimed. Claims use
`FOR UPDATE SKIP LOCKED` on PostgreSQL so replicas never claim the same task; SQLite serialises writers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import TERMINAL_STATES, TaskState, utcnow

from .models import TaskRow

_tasks = TaskRow.__table__
_ENDED = [s.value for s in TERMINAL_STATES]


@dataclass(slots=True, frozen=True)
class Held:
    task_id: str
    state: TaskState
    owner: str


class Leases:
    def __init__(self, engine: AsyncEngine, replica_id: str, ttl_s: float) -> None:
        self._engine = engine
        self.replica_id = replica_id
        self.ttl = timedelta(seconds=ttl_s)
        self._pg = engine.dialect.name == "postgresql"

    def expiry(self, now: datetime | None = None) -> datetime:
        return (now or utcnow()) + self.ttl

    async def claim_queued(self, limit: int) -> list[str]:
        """Claim up to `limit` queued tasks, oldest first; their ids."""
        if limit <= 0:
            return []
        now = utcnow()
        free = or_(_tasks.c.lease_owner.is_(None), _tasks.c.lease_expires_at < now)
        pick = (
            select(_tasks.c.id)
            .where(_tasks.c.state == TaskState.SUBMITTED.value, free)
            .order_by(_tasks.c.created_at)
            .limit(limit)
        )
        if self._pg:
            pick = pick.with_for_update(skip_locked=True)
        stmt = (
            update(_tasks)
            .where(_tasks.c.id.in_(pick.scalar_subquery()), free)
            .values(lease_owner=self.replica_id, lease_expires_at=self.expiry(now))
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            return list((await conn.execute(stmt)).scalars())

    async def take(self, task_id: str, *, owner: str | None = None) -> bool:
        """Take one unfinished task's lease unless another replica holds it alive.

        With `owner`, only that principal's task: a call for someone else's task changes nothing.
        """
        now = utcnow()
        stmt = (
            update(_tasks)
            .where(
                _tasks.c.id == task_id,
                _tasks.c.owner == owner if owner is not None else true(),
                _tasks.c.state.not_in(_ENDED),
                or_(
                    _tasks.c.lease_owner.is_(None),
                    _tasks.c.lease_owner == self.replica_id,
                    _tasks.c.lease_expires_at < now,
                ),
            )
            .values(lease_owner=self.replica_id, lease_expires_at=self.expiry(now))
            .returning(_tasks.c.id)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).first() is not None

    async def holder(self, task_id: str, *, owner: str) -> str | None:
        """The replica holding a live lease on the owner's task, if any."""
        stmt = select(_tasks.c.lease_owner).where(
            _tasks.c.id == task_id, _tasks.c.owner == owner, _tasks.c.lease_expires_at >= utcnow()
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(stmt)).scalar()

    async def renew(self, task_ids: Collection[str]) -> int:
        """Heartbeat: extend this replica's leases on the given unfinished tasks, the runs alive here.

        Only those: a task whose run died in this process (or never started) must see its lease expire,
        so the reaper (here or on another replica) ends it instead of it staying `working` for good.
        """
        if not task_ids:
            return 0
        stmt = (
            update(_tasks)
            .where(
                _tasks.c.id.in_(list(task_ids)),
                _tasks.c.lease_owner == self.replica_id,
                _tasks.c.state.not_in(_ENDED),
            )
            .values(lease_expires_at=self.expiry())
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount

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
            .values(lease_owner=None, lease_expires_at=None)
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt)

    async def expired(self, limit: int = 100) -> list[Held]:
        """Unfinished tasks whose holder stopped renewing (it died, hung, or was cut off)."""
        stmt = (
            select(_tasks.c.id, _tasks.c.state, _tasks.c.lease_owner)
            .where(
                and_(
                    _tasks.c.lease_owner.is_not(None),
                    _tasks.c.lease_expires_at < utcnow(),
                    _tasks.c.state.not_in(_ENDED),
                )
            )
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Held(tid, TaskState(state), owner) for tid, state, owner in rows]

    async def mine(self) -> list[Held]:
        """Unfinished tasks leased to this replica's name: after a restart, left by the previous life."""
        stmt = select(_tasks.c.id, _tasks.c.state, _tasks.c.lease_owner).where(
            _tasks.c.lease_owner == self.replica_id, _tasks.c.state.not_in(_ENDED)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Held(tid, TaskState(state), owner) for tid, state, owner in rows]
