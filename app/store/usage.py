"""Reads of what agents' runs used (`task_usage`, written by the task writer with each report): sums per
context, role, model or day, for one owner (or, for an admin, every owner).

A query costs what it covers: one owner's rows are a range of `(owner, day)` (a context's, of `(owner,
context_id, day)`), all owners' a range of `day`; no read scans other owners' rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .models import TaskUsageRow

_u = TaskUsageRow.__table__.c

GROUPS = {"context": (_u.context_id,), "role": (_u.role,), "model": (_u.model,), "day": (_u.day,)}
"""What `sums` can group by, and the columns of the group's key."""


@dataclass(slots=True, frozen=True)
class UsageQuery:
    """Which rows to sum: an owner's (None: every owner), within days `since`..`until` (inclusive,
    `YYYY-MM-DD`, None: open), of one context or role when given."""

    owner: str | None
    since: str | None = None
    until: str | None = None
    context_id: str | None = None
    role: str | None = None

    def where(self) -> list[ColumnElement[bool]]:
        where: list[ColumnElement[bool]] = []
        if self.owner is not None:
            where.append(_u.owner == self.owner)
        if self.context_id is not None:
            where.append(_u.context_id == self.context_id)
        if self.since is not None:
            where.append(_u.day >= self.since)
        if self.until is not None:
            where.append(_u.day <= self.until)
        if self.role is not None:
            where.append(_u.role == self.role)
        return where


_SUMS = (
    func.sum(_u.input_tokens).label("inputTokens"),
    func.sum(_u.output_tokens).label("outputTokens"),
    func.sum(_u.cache_read_tokens).label("cacheReadTokens"),
    func.sum(_u.cache_write_tokens).label("cacheWriteTokens"),
    func.sum(_u.cost_usd).label("costUsd"),
    func.sum(_u.wall_ms).label("wallMs"),
    func.sum(_u.turns).label("turns"),
    func.sum(_u.tool_calls).label("toolCalls"),
    func.sum(_u.reports).label("reports"),
    func.count(func.distinct(_u.task_id)).label("tasks"),
)
_INTS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "wallMs", "turns", "toolCalls")


def group_keys(query: UsageQuery, by: str) -> tuple[Any, ...]:
    """The columns of a group's key: `GROUPS[by]`, a context's with its owner when summing every owner."""
    keys = GROUPS[by]
    return (_u.owner, *keys) if by == "context" and query.owner is None else keys


def grouped(query: UsageQuery, by: str) -> Select[Any]:
    """The sums of the rows `query` names, per group."""
    keys = group_keys(query, by)
    return select(*keys, *_SUMS).where(*query.where()).group_by(*keys)


def _figures(row: Any) -> dict[str, Any]:
    m = row._mapping
    out: dict[str, Any] = {k: int(m[k] or 0) for k in _INTS}
    out["costUsd"] = None if m["costUsd"] is None else round(float(m["costUsd"]), 10)
    out["reports"] = int(m["reports"] or 0)
    out["tasks"] = int(m["tasks"] or 0)
    return out


class UsageReads:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def sums(
        self, by: str, limit: int, **query: str | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
        """Sums per group (`GROUPS`) of the rows `query` (`UsageQuery`'s fields) names, in key order, at
        most `limit` groups; their total; and whether groups were left off. A context's key is
        `(owner, contextId)` when every owner's rows are summed."""
        q = UsageQuery(**query)
        groups, more = await self._groups(q, by, limit)
        return groups, await self._total(q), more

    async def day_cost(self, owner: str, day: str) -> float:
        """What `owner`'s runs cost on `day` (`YYYY-MM-DD`, UTC), its rows' known costs (BUDGET_DAY_USD)."""
        stmt = select(func.sum(_u.cost_usd)).where(_u.owner == owner, _u.day == day)
        async with self._engine.connect() as conn:
            total = (await conn.execute(stmt)).scalar()
        return round(float(total or 0.0), 10)

    async def _groups(self, query: UsageQuery, by: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
        keys = group_keys(query, by)
        names = [k.name for k in keys]
        stmt = grouped(query, by).order_by(*keys).limit(limit + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        out = []
        for row in rows[:limit]:
            key = {_WIRE[n]: row._mapping[n] for n in names}
            out.append({**key, **_figures(row)})
        return out, len(rows) > limit

    async def _total(self, query: UsageQuery) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(*_SUMS).where(*query.where()))).one()
        return _figures(row)


_WIRE = {"owner": "owner", "context_id": "contextId", "role": "role", "model": "model", "day": "day"}
