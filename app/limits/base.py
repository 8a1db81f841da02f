"""The limiter interface: a rate on new tasks and a cap on open streams, both per principal.

Implementations raise the protocol's own errors, so every route answers a limit the same way
(429 with `Retry-After` for the rate, 429 for streams), whichever implementation is in use.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

from app.protocol.errors import RateLimitedError, TooManyStreamsError


def rate_limited(per_min: float, burst: int, wait_s: float) -> RateLimitedError:
    """The error for a refused task creation; `retryAfter` is whole seconds, at least 1."""
    wait = max(1, math.ceil(wait_s))
    return RateLimitedError(
        f"Too many new tasks: at most {per_min:g} a minute (burst {burst}); retry in {wait} s",
        {"retryAfter": wait},
    )


def too_many_streams(held: int, cap: int) -> TooManyStreamsError:
    """The error for a refused stream."""
    return TooManyStreamsError(
        f"This principal already has {held} open streams (the limit); close one first",
        {"limit": cap},
    )


class TaskRate(ABC):
    """New tasks per principal: `burst` at once, refilled at `per_min` a minute (0: unlimited)."""

    def __init__(self, per_min: float, burst: int) -> None:
        self.per_min = per_min
        self.burst = burst

    @abstractmethod
    async def take(self, owner: str) -> None:
        """Count one new task of `owner`, or raise RateLimitedError (nothing counted)."""


class Slot(ABC):
    """One admitted stream; `release` gives its place back (idempotent, never blocks)."""

    @abstractmethod
    def release(self) -> None: ...


class StreamSlots(ABC):
    """Open streams per principal; a cap of 0 means none."""

    def __init__(self, cap: int) -> None:
        self.cap = cap

    @abstractmethod
    async def acquire(self, owner: str) -> Slot:
        """A place for one more stream of `owner`, or TooManyStreamsError."""

    async def start(self) -> None:  # noqa: B027 - hook for shared implementations
        """Begin background work (e.g. keeping shared entries alive)."""

    async def aclose(self) -> None:  # noqa: B027 - hook for shared implementations
        """Give back every place this process still holds."""
