"""The limits of one process, chosen by the settings: in memory alone, shared through Redis when the
bus has a Redis client (every replica then counts against the same numbers)."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from app.settings import Settings

from .base import StreamSlots, TaskRate
from .memory import MemoryStreamSlots, MemoryTaskRate
from .redis import RedisStreamSlots, RedisTaskRate


@dataclass(slots=True)
class Limits:
    """Per message: parts and text; per principal: the task rate and the open-stream cap."""

    max_parts: int
    max_text: int
    rate: TaskRate
    streams: StreamSlots

    async def start(self) -> None:
        await self.streams.start()

    async def aclose(self) -> None:
        await self.streams.aclose()


def build(settings: Settings, redis: Redis | None = None, role: str | None = None) -> Limits:
    """The limits for these settings: shared through `redis` when given, else this process's own; with
    `role` (a deployment of several roles), counted for that role alone."""
    rate: TaskRate
    streams: StreamSlots
    if redis is None:
        rate = MemoryTaskRate(settings.task_rate_per_min, settings.task_rate_burst)
        streams = MemoryStreamSlots(settings.max_streams_per_principal)
    else:
        rate = RedisTaskRate(redis, settings.task_rate_per_min, settings.task_rate_burst, role)
        streams = RedisStreamSlots(
            redis, settings.max_streams_per_principal, settings.replica_id, settings.stream_slot_ttl_s, role
        )
    return Limits(settings.max_message_parts, settings.max_message_text_chars, rate, streams)
