"""Webhook configs in the database: create (or replace), get, list, delete, always within one owner.

Every query names the owner, so one caller never sees or changes another's configs even when it knows the
task and config ids. A config read back carries its delivery outcomes (`PushConfig.delivery`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import PushConfig, iso, new_id, utcnow
from app.store.tables import push_configs as _configs, push_outbox as _outbox

_pending = (
    select(func.count())
    .where(_outbox.c.config_pk == _configs.c.pk)
    .correlate(_configs)
    .scalar_subquery()
    .label("pending")
)


def _ts(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


def to_domain(row: Row[Any]) -> PushConfig:
    return PushConfig(
        url=row.url,
        id=row.config_id,
        token=row.token,
        scheme=row.auth_scheme,
        credentials=row.auth_credentials,
        task_id=row.task_id,
        version=row.version,
        delivery={
            "attempts": row.attempts,
            "delivered": row.delivered,
            "failed": row.failed,
            "pending": row.pending,
            "lastOutcome": row.last_outcome,
            "lastAttemptAt": _ts(row.last_attempt_at),
            "lastDeliveredAt": _ts(row.last_delivered_at),
            "nextRetryAt": _ts(row.retry_at),
        },
    )


def new_row(owner: str, task_id: str, cfg: PushConfig, now: datetime) -> dict[str, Any]:
    """The row for a new config; the server picks the id when the client gave none."""
    return {
        "task_id": task_id,
        "config_id": cfg.id or new_id(),
        "owner": owner,
        "version": cfg.version,
        "url": cfg.url,
        "token": cfg.token,
        "auth_scheme": cfg.scheme,
        "auth_credentials": cfg.credentials,
        "created_at": now,
    }


class PushConfigs:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def put(self, owner: str, task_id: str, cfg: PushConfig) -> PushConfig:
        """Store `cfg` for the task; a config with the same id is replaced (its queue kept)."""
        row = new_row(owner, task_id, cfg, utcnow())
        changes = {k: row[k] for k in ("version", "url", "token", "auth_scheme", "auth_credentials")}
        where = (
            _configs.c.task_id == task_id,
            _configs.c.config_id == row["config_id"],
            _configs.c.owner == owner,
        )
        for _ in range(2):
            try:
                async with self._engine.begin() as conn:
                    if (
                        cfg.id
                        and (await conn.execute(update(_configs).where(*where).values(**changes))).rowcount
                    ):
                        break
                    await conn.execute(insert(_configs).values(**row))
                    break
            except IntegrityError:
                continue
        stored = await self.get(owner, task_id, row["config_id"])
        assert stored is not None
        return stored

    async def get(self, owner: str, task_id: str, config_id: str | None) -> PushConfig | None:
        """One config; with no id, the task's first (the deprecated v0.3 form of the call)."""
        stmt = select(_configs, _pending).where(_configs.c.owner == owner, _configs.c.task_id == task_id)
        if config_id is not None:
            stmt = stmt.where(_configs.c.config_id == config_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt.order_by(_configs.c.pk).limit(1))).first()
        return to_domain(row) if row is not None else None

    async def list(
        self, owner: str, task_id: str, limit: int | None = None, after: int = 0
    ) -> tuple[list[PushConfig], int | None]:
        """The task's configs in creation order, and the cursor of the next page (None: no more)."""
        stmt = (
            select(_configs, _pending)
            .where(_configs.c.owner == owner, _configs.c.task_id == task_id, _configs.c.pk > after)
            .order_by(_configs.c.pk)
        )
        if limit is not None:
            stmt = stmt.limit(limit + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        return [to_domain(r) for r in rows], (rows[-1].pk if more else None)

    async def delete(self, owner: str, task_id: str, config_id: str) -> None:
        """Remove the config and its undelivered notifications; removing a missing one is fine."""
        stmt = delete(_configs).where(
            _configs.c.owner == owner, _configs.c.task_id == task_id, _configs.c.config_id == config_id
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt)
