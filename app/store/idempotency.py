"""Idempotency-Keys (IETF httpapi draft) per principal: what a key's first request made, for `ttl`.

A key is stored by the writer in the transaction of the task its request made (or alone, for the agent's
direct reply); this module reads keys, builds their rows, and deletes expired ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import Message, utcnow

from .models import IdempotencyKeyRow

PURGE_EVERY_S = 300.0


@dataclass(slots=True, frozen=True)
class IdemKey:
    """A request's Idempotency-Key and the fingerprint of what it asked."""

    key: str
    fingerprint: str


@dataclass(slots=True)
class StoredKey:
    fingerprint: str
    task_id: str | None
    reply: Message | None


class IdempotencyKeys:
    def __init__(self, engine: AsyncEngine, ttl_s: float) -> None:
        self._engine = engine
        self.ttl = timedelta(seconds=ttl_s)
        self._purge_every_s = min(PURGE_EVERY_S, ttl_s)
        self._purged_at = 0.0

    def row(
        self, owner: str, key: IdemKey, *, task_id: str | None = None, reply: Message | None = None
    ) -> dict[str, Any]:
        now = utcnow()
        return {
            "owner": owner,
            "key": key.key,
            "fingerprint": key.fingerprint,
            "task_id": task_id,
            "reply": reply.to_store() if reply is not None else None,
            "created_at": now,
            "expires_at": now + self.ttl,
        }

    async def find(self, owner: str, key: str) -> StoredKey | None:
        """The key's unexpired row. An expired one is deleted here, so the key can be stored again."""
        await self._purge_now_and_then()
        now = utcnow()
        t = IdempotencyKeyRow
        query = select(t.fingerprint, t.task_id, t.reply, (t.expires_at > now).label("live")).where(
            t.owner == owner, t.key == key
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        if not row.live:
            async with self._engine.begin() as conn:
                await conn.execute(delete(t).where(t.owner == owner, t.key == key, t.expires_at <= now))
            return None
        reply = Message.from_store(row.reply) if row.reply is not None else None
        return StoredKey(row.fingerprint, row.task_id, reply)

    async def purge(self, now: datetime | None = None) -> int:
        """Delete every expired key; returns how many."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(IdempotencyKeyRow).where(IdempotencyKeyRow.expires_at <= (now or utcnow()))
            )
        return result.rowcount or 0

    async def _purge_now_and_then(self) -> None:
        """Expired keys go at most every few minutes (or TTL), on the path that uses keys (none used: none
        kept)."""
        if time.monotonic() - self._purged_at < self._purge_every_s:
            return
        self._purged_at = time.monotonic()
        await self.purge()
