"""Per-message and per-principal limits: parts and text per message, new tasks per minute, open streams.

Rate and stream counts are kept per replica, in memory: behind a load balancer of N replicas a principal
gets up to N times the configured numbers. Every limit answers with its own clear error, before anything
is stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from app.protocol.errors import A2AError, InvalidParamsError, RateLimitedError, TooManyStreamsError
from app.protocol.model import Message
from app.settings import Settings

from .calls import Call, Item, Stream, accept_message

PRUNE_AT = 10_000
"""Buckets kept before full (idle) ones are dropped, so many one-off principals cannot grow memory."""


def http_headers(err: A2AError) -> dict[str, str]:
    """Headers an error adds to its HTTP response: `Retry-After` for a rate limit."""
    if isinstance(err, RateLimitedError) and isinstance(err.data, dict) and "retryAfter" in err.data:
        return {"Retry-After": str(err.data["retryAfter"])}
    return {}


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


@dataclass(slots=True)
class TaskRate:
    """A token bucket per principal: `burst` tasks at once, refilled at `per_min` a minute."""

    per_min: float
    burst: int
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take(self, owner: str, now: float | None = None) -> None:
        if self.per_min <= 0:
            return
        now = time.monotonic() if now is None else now
        rate = self.per_min / 60.0
        bucket = self._buckets.get(owner)
        if bucket is None:
            if len(self._buckets) >= PRUNE_AT:
                self._prune(now, rate)
            bucket = self._buckets[owner] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            wait = math.ceil((1.0 - bucket.tokens) / rate)
            raise RateLimitedError(
                f"Too many new tasks: at most {self.per_min:g} a minute (burst {self.burst}); "
                f"retry in {wait} s",
                {"retryAfter": wait},
            )
        bucket.tokens -= 1.0

    def _prune(self, now: float, rate: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * rate >= self.burst]
        for k in full:
            del self._buckets[k]


@dataclass(slots=True)
class StreamSlots:
    """Open streams per principal; 0 means no cap."""

    cap: int
    _open: dict[str, int] = field(default_factory=dict)

    def acquire(self, owner: str) -> None:
        n = self._open.get(owner, 0)
        if self.cap and n >= self.cap:
            raise TooManyStreamsError(
                f"This principal already has {n} open streams here (the limit); close one first",
                {"limit": self.cap},
            )
        self._open[owner] = n + 1

    def release(self, owner: str) -> None:
        n = self._open.get(owner, 0) - 1
        if n > 0:
            self._open[owner] = n
        else:
            self._open.pop(owner, None)

    def held(self, owner: str) -> int:
        return self._open.get(owner, 0)


class Limits:
    def __init__(self, settings: Settings) -> None:
        self.max_parts = settings.max_message_parts
        self.max_text = settings.max_message_text_chars
        self.rate = TaskRate(settings.task_rate_per_min, settings.task_rate_burst)
        self.streams = StreamSlots(settings.max_streams_per_principal)


def admit(message: Message, call: Call) -> Message:
    """Everything a message must pass before it is stored: media types, size, and the task rate."""
    accept_message(message, call)
    limits: Limits = call.c.limits
    if len(message.parts) > limits.max_parts:
        raise InvalidParamsError(
            f"A message may have at most {limits.max_parts} parts; this one has {len(message.parts)}",
            {"maxParts": limits.max_parts},
        )
    text = sum(len(p.text) for p in message.parts if p.text)
    if text > limits.max_text:
        raise InvalidParamsError(
            f"A message may carry at most {limits.max_text} characters of text; this one has {text}",
            {"maxTextChars": limits.max_text},
        )
    if not message.task_id:
        limits.rate.take(call.owner)
    return message


class _HeldStream:
    """The stream's items; the slot is freed exactly once, when they end or are closed (even unstarted)."""

    def __init__(self, items: AsyncIterator[Item], release: Callable[[], None]) -> None:
        self._items = items
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> _HeldStream:
        return self

    async def __anext__(self) -> Item:
        try:
            return await anext(self._items)
        except BaseException:
            self._free()
            raise

    def _free(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    async def aclose(self) -> None:
        self._free()
        await self._items.aclose()  # type: ignore[attr-defined]


async def open_stream(call: Call, start: Callable[[], Awaitable[Stream]]) -> Stream:
    """Start a stream within the caller's cap; the slot is freed when the stream ends or fails to start."""
    slots = call.c.limits.streams
    owner = call.owner
    slots.acquire(owner)
    try:
        items, encode = await start()
    except BaseException:
        slots.release(owner)
        raise
    return _HeldStream(items, lambda: slots.release(owner)), encode
