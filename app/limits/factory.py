"""The limits of one process, chosen by its `LimitOptions`: in memory alone, shared through Redis when the
bus has a Redis client (every replica then counts against the same numbers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from app.options import from_attributes

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


class LimitSettings(Protocol):
    """What `LimitOptions.from_settings` reads of the server's settings (`settings.Settings`, not imported
    here)."""

    max_message_parts: int
    max_message_text_chars: int
    task_rate_per_min: float
    task_rate_burst: int
    max_streams_per_principal: int
    stream_slot_ttl_s: float
    replica_id: str


@dataclass(frozen=True, slots=True)
class LimitOptions:
    """The numbers the limits hold to and the replica the stream slots are counted for, each named as its
    setting; the defaults are the settings'."""

    replica_id: str
    max_message_parts: int = 64
    max_message_text_chars: int = 1_000_000
    task_rate_per_min: float = 120.0
    task_rate_burst: int = 30
    max_streams_per_principal: int = 100
    stream_slot_ttl_s: float = 30.0

    @classmethod
    def from_settings(cls, settings: LimitSettings) -> LimitOptions:
        return from_attributes(cls, settings)


def build(options: LimitOptions, redis: Redis | None = None, role: str | None = None) -> Limits:
    """The limits of these options: shared through `redis` when given, else this process's own; with
    `role` (a deployment of several roles), counted for that role alone."""
    rate: TaskRate
    streams: StreamSlots
    if redis is None:
        rate = MemoryTaskRate(options.task_rate_per_min, options.task_rate_burst)
        streams = MemoryStreamSlots(options.max_streams_per_principal)
    else:
        rate = RedisTaskRate(redis, options.task_rate_per_min, options.task_rate_burst, role)
        streams = RedisStreamSlots(
            redis, options.max_streams_per_principal, options.replica_id, options.stream_slot_ttl_s, role
        )
    return Limits(options.max_message_parts, options.max_message_text_chars, rate, streams)
