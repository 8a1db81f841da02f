"""The agent instances live now (discovery): one row per role a process runs, named `role:instance_id`.

A process writes its rows every heartbeat (`upsert`, which sets `last_seen`), reads the ones seen within the
maximum age (`live`), and deletes its own on a clean shutdown (`forget`). A remote worker's row is written by
whichever replica the worker calls, so its goodbye marks the row left instead (`leave`): a call the worker
sent before it left, handled by another replica after, refreshes nothing (`upsert(revive=False)`), and the
worker's next life clears the mark with its first call (`revive`). A process that died without saying
so leaves rows that are hidden once older than the maximum age and deleted later, a bounded batch now and
then (`purge_stale`), so the table holds what was live lately, not every name ever used. Times are the
writers' clocks, as for leases.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import utcnow

from .tables import agent_instances as _t

Kind = Literal["replica", "worker"]

STALE_FACTOR = 10
"""Rows older than this many maximum ages are deleted (lazily): long past any chance of coming back."""
PURGE_BATCH = 100
"""Most stale rows one purge deletes: a purge is one short statement, whatever piled up."""

_UPDATED = ("role", "instance_id", "kind", "description", "card_url", "capabilities", "slots", "running")
"""What a heartbeat refreshes besides `last_seen` (and `started_at`, the writer's own start)."""


@dataclass(slots=True, frozen=True)
class InstanceRecord:
    """One row: an instance of a role as it was at its last heartbeat."""

    role: str
    instance_id: str
    kind: Kind
    description: str
    card_url: str
    capabilities: dict[str, Any] = field(default_factory=dict)
    slots: int = 0
    running: int = 0
    last_seen: datetime | None = None
    """Set by `upsert` (now); read back by `live`."""
    started_at: datetime | None = None

    @property
    def name(self) -> str:
        """The discovery identity: `role:instance_id`."""
        return instance_name(self.role, self.instance_id)

    @property
    def free(self) -> int:
        return max(self.slots - self.running, 0)

    def announced(
        self, instance_id: str, kind: Kind, slots: int, running: int, started_at: datetime
    ) -> InstanceRecord:
        """This description of a role (`wiring._describe`: as its card describes it) as one of its instances
        announces itself: who it is, its kind, its load and its start."""
        return dataclasses.replace(
            self, instance_id=instance_id, kind=kind, slots=slots, running=running, started_at=started_at
        )

    def described(self) -> dict[str, Any]:
        """What it says of itself, as its row and `GET /agents` both name it."""
        return {
            "name": self.name,
            "role": self.role,
            "instance_id": self.instance_id,
            "kind": self.kind,
            "description": self.description,
            "card_url": self.card_url,
            "capabilities": self.capabilities,
            "slots": self.slots,
            "running": self.running,
        }


def instance_name(role: str, instance_id: str) -> str:
    return f"{role}:{instance_id}"


def _aware(ts: datetime) -> datetime:
    """SQLite gives back naive datetimes; every one stored here is UTC."""
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


class Instances:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self._purged_at: float | None = None

    async def upsert(
        self, instances: Sequence[InstanceRecord], now: datetime | None = None, *, revive: bool = True
    ) -> None:
        """Insert or refresh these instances' rows, `last_seen` now (or `now`), in one transaction; with
        `revive` False, a row marked left stays as it is."""
        if not instances:
            return
        now = now or utcnow()
        values = [{**i.described(), "last_seen": now, "started_at": i.started_at or now} for i in instances]
        insert = postgresql.insert(_t) if self._pg else sqlite.insert(_t)
        stmt = insert.on_conflict_do_update(
            index_elements=[_t.c.name],
            set_={**{c: insert.excluded[c] for c in (*_UPDATED, "last_seen", "started_at")}, "left_at": None},
            where=None if revive else _t.c.left_at.is_(None),
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt, values)

    async def live(self, max_age_s: float, now: datetime | None = None) -> list[InstanceRecord]:
        """The instances seen within `max_age_s`, by role then name; stale rows are purged now and then."""
        now = now or utcnow()
        await self.purge_stale(max_age_s, now)
        query = (
            select(_t)
            .where(_t.c.last_seen >= now - timedelta(seconds=max_age_s), _t.c.left_at.is_(None))
            .order_by(_t.c.role, _t.c.name)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            InstanceRecord(
                role=r.role,
                instance_id=r.instance_id,
                kind=r.kind,
                description=r.description,
                card_url=r.card_url,
                capabilities=r.capabilities or {},
                slots=r.slots,
                running=r.running,
                last_seen=_aware(r.last_seen),
                started_at=_aware(r.started_at),
            )
            for r in rows
        ]

    async def forget(self, names: Collection[str]) -> None:
        """Delete these instances' rows (a clean shutdown): they leave the listing at once."""
        if not names:
            return
        async with self._engine.begin() as conn:
            await conn.execute(delete(_t).where(_t.c.name.in_(list(names))))

    async def leave(self, names: Collection[str], now: datetime | None = None) -> None:
        """Mark these instances' rows left (a remote worker's goodbye): out of the listing at once, and not
        refreshed by `upsert(revive=False)` until `revive`."""
        if not names:
            return
        async with self._engine.begin() as conn:
            await conn.execute(update(_t).where(_t.c.name.in_(list(names))).values(left_at=now or utcnow()))

    async def revive(self, name: str) -> None:
        """Clear the left mark of this instance's row (the worker's next life said hello)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                update(_t).where(_t.c.name == name, _t.c.left_at.is_not(None)).values(left_at=None)
            )

    async def purge(self, older_than_s: float, limit: int = PURGE_BATCH, now: datetime | None = None) -> int:
        """Delete at most `limit` rows not seen for `older_than_s`; how many."""
        cutoff = (now or utcnow()) - timedelta(seconds=older_than_s)
        oldest = select(_t.c.name).where(_t.c.last_seen < cutoff).order_by(_t.c.last_seen).limit(limit)
        async with self._engine.begin() as conn:
            result = await conn.execute(delete(_t).where(_t.c.name.in_(oldest.scalar_subquery())))
        return result.rowcount or 0

    async def purge_stale(self, max_age_s: float, now: datetime | None = None) -> int:
        """`purge` of rows older than `STALE_FACTOR` maximum ages, at most once per maximum age per
        process (the first call purges): a few statements an hour whatever the traffic."""
        clock = time.monotonic()
        if self._purged_at is not None and clock - self._purged_at < max_age_s:
            return 0
        self._purged_at = clock
        return await self.purge(STALE_FACTOR * max_age_s, now=now)
