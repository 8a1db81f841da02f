"""The limits of one process, in memory: exact and free, but each replica counts only its own callers."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .base import Slot, StreamSlots, TaskRate, rate_limited, too_many_streams

PRUNE_AT = 10_000
"""Buckets kept before full (idle) ones are dropped, so many one-off principals cannot grow memory."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class MemoryTaskRate(TaskRate):
    """A token bucket per principal."""

    def __init__(self, per_min: float, burst: int) -> None:
        super().__init__(per_min, burst)
        self._buckets: dict[str, _Bucket] = {}

    async def take(self, owner: str) -> None:
        self.take_now(owner)

    def take_now(self, owner: str, now: float | None = None) -> None:
        """`take` without awaiting; `now` (monotonic seconds) for tests."""
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
            raise rate_limited(self.per_min, self.burst, (1.0 - bucket.tokens) / rate)
        bucket.tokens -= 1.0

    def _prune(self, now: float, rate: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * rate >= self.burst]
        for k in full:
            del self._buckets[k]


class _MemorySlot(Slot):
    def __init__(self, slots: MemoryStreamSlots, owner: str) -> None:
        self._slots: MemoryStreamSlots | None = slots
        self._owner = owner

    def release(self) -> None:
        if self._slots is not None:
            self._slots.give_back(self._owner)
            self._slots = None


class MemoryStreamSlots(StreamSlots):
    """A count of open streams per principal."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self._open: dict[str, int] = {}

    async def acquire(self, owner: str) -> Slot:
        self.take_now(owner)
        return _MemorySlot(self, owner)

    def take_now(self, owner: str) -> None:
        """Count one more stream of `owner` within the cap (the synchronous core of `acquire`)."""
        n = self._open.get(owner, 0)
        if self.cap and n >= self.cap:
            raise too_many_streams(n, self.cap)
        self._open[owner] = n + 1

    def give_back(self, owner: str) -> None:
        n = self._open.get(owner, 0) - 1
        if n > 0:
            self._open[owner] = n
        else:
            self._open.pop(owner, None)

    def held(self, owner: str) -> int:
        return self._open.get(owner, 0)
