"""The admin command line's reads (`a2a-server tasks ...`): a task by id whoever owns it, with what only an
operator looks at (its lease, its webhooks' deliveries, its usage rows). Run by the operator against
`DATABASE_URL`, never by the server: these reads name no owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .tables import push_configs as _configs, push_outbox as _outbox, task_usage as _usage, tasks as _tasks


@dataclass(slots=True)
class TaskRecord:
    """A task's row without its history, artifacts or status body."""

    id: str
    owner: str
    role: str
    context_id: str
    state: str
    last_seq: int
    status_at: str
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    lease_suspect_at: datetime | None


@dataclass(slots=True)
class Delivery:
    """One webhook of a task and how its deliveries went."""

    config_id: str
    url: str
    version: str
    delivered: int
    failed: int
    attempts: int
    pending: int
    """Notifications still queued."""
    last_outcome: str | None
    last_attempt_at: datetime | None
    last_delivered_at: datetime | None
    claimed_by: str | None


class AdminReads:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def find(self, task_id: str) -> TaskRecord | None:
        c = _tasks.c
        query = select(
            c.id,
            c.owner,
            c.role,
            c.context_id,
            c.state,
            c.last_seq,
            c.status_at,
            c.created_at,
            c.updated_at,
            c.lease_owner,
            c.lease_expires_at,
            c.lease_suspect_at,
        ).where(c.id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else TaskRecord(*(_utc(v) for v in row))

    async def deliveries(self, task_id: str) -> list[Delivery]:
        c = _configs.c
        pending = (
            select(func.count()).where(_outbox.c.config_pk == c.pk).correlate(_configs).scalar_subquery()
        )
        query = (
            select(
                c.config_id,
                c.url,
                c.version,
                c.delivered,
                c.failed,
                c.attempts,
                pending,
                c.last_outcome,
                c.last_attempt_at,
                c.last_delivered_at,
                c.claimed_by,
            )
            .where(c.task_id == task_id)
            .order_by(c.pk)
        )
        async with self._engine.connect() as conn:
            return [Delivery(*(_utc(v) for v in r)) for r in (await conn.execute(query)).all()]

    async def usage(self, task_id: str) -> list[dict[str, Any]]:
        """The task's `task_usage` rows (one per report and model), in event order."""
        c = _usage.c
        query = (
            select(
                c.seq,
                c.model,
                c.input_tokens,
                c.output_tokens,
                c.cache_read_tokens,
                c.cache_write_tokens,
                c.cost_usd,
                c.cost_source,
                c.wall_ms,
                c.turns,
                c.tool_calls,
            )
            .where(c.task_id == task_id)
            .order_by(c.seq, c.model)
        )
        async with self._engine.connect() as conn:
            return [dict(r._mapping) for r in (await conn.execute(query)).all()]


def _utc(value: Any) -> Any:
    """Times as UTC: SQLite gives them back without their zone."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
