"""Each coding task's last checkpoint (`task_checkpoints`): the archive its holder saved (its workspace and
its CLI's session) so that another holder can go on with the task when this one dies.

A checkpoint is whole or absent: it is one row, replaced in one statement, and its SHA-256 is kept beside it
and checked on every read, so a copy that was cut or changed is refused (`CorruptCheckpointError`), never
restored. Reads and writes name the task's owner: one principal's checkpoint is never given to another's
task. The row goes with its task (a foreign key, `ON DELETE CASCADE`), so retention needs nothing more.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import utcnow

from .tables import task_checkpoints as _cp, tasks as _tasks

_c = _cp.c


class CheckpointRefusedError(Exception):
    """A checkpoint the store will not keep or give: its text says why."""


class CheckpointTooLargeError(CheckpointRefusedError):
    """An archive over CHECKPOINT_MAX_MB."""


class CorruptCheckpointError(CheckpointRefusedError):
    """A stored archive whose digest does not match the one saved with it."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    data: bytes
    manifest: dict[str, Any]
    taken_at: datetime
    holder: str


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A checkpoint's row without its archive: what the reaper and the console need."""

    taken_at: datetime
    holder: str
    size: int


class RunCheckpoints:
    """The checkpoints of every task in one database."""

    def __init__(self, engine: AsyncEngine, max_bytes: int) -> None:
        self._engine = engine
        self.max_bytes = max_bytes

    async def save(
        self, task_id: str, owner: str, data: bytes, manifest: dict[str, Any], holder: str
    ) -> None:
        """Replace the task's checkpoint: one delete and one insert in one transaction, only for the task's
        owner and by its lease holder (`CheckpointRefusedError` otherwise: a holder that has just lost the
        task never overwrites what its next holder goes on from; the task's row is locked meanwhile)."""
        if len(data) > self.max_bytes:
            raise CheckpointTooLargeError(
                f"the checkpoint is {len(data)} bytes, over the limit of {self.max_bytes} (CHECKPOINT_MAX_MB)"
            )
        row = {
            "task_id": task_id,
            "owner": owner,
            "holder": holder,
            "taken_at": utcnow(),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "manifest": manifest,
            "data": data,
        }
        async with self._engine.begin() as conn:
            query = select(_tasks.c.owner, _tasks.c.lease_owner).where(_tasks.c.id == task_id)
            if self._engine.dialect.name == "postgresql":
                query = query.with_for_update()
            found = (await conn.execute(query)).first()
            if found is None or found.owner != owner:
                raise CheckpointRefusedError("the task is not this principal's")
            if found.lease_owner != holder:
                raise CheckpointRefusedError("the task is no longer held by the one saving it")
            await conn.execute(delete(_cp).where(_c.task_id == task_id))
            await conn.execute(insert(_cp).values(row))

    async def load(self, task_id: str, owner: str) -> StoredCheckpoint | None:
        """The task's checkpoint for its owner; None when there is none; `CorruptCheckpointError` when its
        archive does not match its digest."""
        query = select(_c.data, _c.manifest, _c.taken_at, _c.holder, _c.sha256, _c.size).where(
            _c.task_id == task_id, _c.owner == owner
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        data = bytes(row.data)
        if len(data) != row.size or hashlib.sha256(data).hexdigest() != row.sha256:
            taken = f"{row.taken_at:%Y-%m-%d %H:%M:%S} UTC"
            raise CorruptCheckpointError(f"its checkpoint of {taken} is corrupt (its digest does not match)")
        return StoredCheckpoint(data, dict(row.manifest), _utc(row.taken_at), row.holder)

    async def info(self, task_id: str) -> CheckpointInfo | None:
        """Whether the task has a checkpoint (read by its writer, which knows its owner), without the
        archive."""
        query = select(_c.taken_at, _c.holder, _c.size).where(_c.task_id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else CheckpointInfo(_utc(row.taken_at), row.holder, row.size)


def _utc(moment: datetime) -> datetime:
    """A stored time as UTC (SQLite gives it back without its zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
