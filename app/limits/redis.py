"""Cluster-wide limits in Redis: every replica admits against the same numbers.

Keys hold a sha256 of the principal (names never appear in Redis, and any name makes a valid key):

- `a2a:limits:rate:<h>`: the GCRA "theoretical arrival time" of the principal's next task (ms, Redis clock),
  one Lua script per task creation (one round trip), expiring once the bucket would be full again;
- `a2a:limits:streams:<h>`: a sorted set of the principal's open streams (`<replica>:<id>`), scored by
  expiry. Each replica re-scores its own entries every TTL/3 and removes an entry when its stream closes;
  admission drops expired entries first, so a crashed replica's streams stop counting within the TTL.

Times come from Redis (`TIME`), so replicas' clocks need not agree.

Redis unreachable (or slower than `CALL_TIMEOUT_S`): the limits fail open to this process's own in-memory
counts, with one warning per outage; a request never fails because of Redis. Streams admitted meanwhile
are written back by the next refresh once Redis answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import background

from .base import Slot, StreamSlots, TaskRate, rate_limited, too_many_streams
from .memory import MemoryTaskRate

log = logging.getLogger(__name__)

RATE_PREFIX = "a2a:limits:rate:"
STREAMS_PREFIX = "a2a:limits:streams:"
CALL_TIMEOUT_S = 1.0
"""Longest a limit check waits for Redis before falling back to the local count."""
RETRY_S = 1.0
"""After a failure, how long checks use the local count before trying Redis again (no per-request
connect attempts against a Redis that is down)."""
REDIS_DOWN = (RedisError, OSError, TimeoutError)

RATE_LUA = """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
local allow_at = next_tat - burst * interval
if now < allow_at then
  return {0, math.ceil(allow_at - now)}
end
redis.call('SET', KEYS[1], string.format('%.3f', next_tat), 'PX', math.ceil(next_tat - now))
return {1, 0}
"""
"""GCRA, the token bucket's exact equivalent: `burst` at once, then one per `interval` ms; returns
{allowed, ms until the next one would be}."""

ACQUIRE_LUA = """
local cap = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= cap then
  return {0, n}
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, n + 1}
"""
"""Drop expired streams, then admit one more if under the cap; returns {admitted, streams held}."""

REFRESH_LUA = """
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return #ARGV - 1
"""
"""Push the expiry of this replica's open streams forward (re-adding any Redis lost)."""


def principal_key(prefix: str, owner: str) -> str:
    return prefix + hashlib.sha256(owner.encode()).hexdigest()[:32]


class _Health:
    """Whether Redis answered lately; warns once per outage and pauses attempts briefly after a failure."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._down_since: float | None = None
        self._retry_at = 0.0

    def usable(self) -> bool:
        return self._down_since is None or time.monotonic() >= self._retry_at

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self._retry_at = now + RETRY_S
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "redis unreachable for the %s (%s): counting per process until it is back",
                self.what,
                exc.__class__.__name__ if not str(exc) else exc,
            )

    def ok(self) -> None:
        if self._down_since is not None:
            log.warning(
                "redis reachable again: the %s is cluster-wide again (after %.0f s)",
                self.what,
                time.monotonic() - self._down_since,
            )
            self._down_since = None


class RedisTaskRate(TaskRate):
    """One GCRA per principal in Redis; the in-memory bucket while Redis is unreachable."""

    def __init__(self, redis: Redis, per_min: float, burst: int, role: str | None = None) -> None:
        super().__init__(per_min, burst)
        # Each role of a deployment of several has its own counts.
        self._prefix = RATE_PREFIX + (f"{role}:" if role else "")
        self._script = redis.register_script(RATE_LUA)
        self._fallback = MemoryTaskRate(per_min, burst)
        self._health = _Health("task rate limit")

    async def take(self, owner: str) -> None:
        if self.per_min <= 0:
            return
        if not self._health.usable():
            self._fallback.take_now(owner)
            return
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                allowed, wait_ms = await self._script(
                    keys=[principal_key(self._prefix, owner)], args=[60_000.0 / self.per_min, self.burst]
                )
        except REDIS_DOWN as exc:
            self._health.failed(exc)
            self._fallback.take_now(owner)
            return
        self._health.ok()
        if not allowed:
            raise rate_limited(self.per_min, self.burst, int(wait_ms) / 1000)


class _NoSlot(Slot):
    def release(self) -> None:
        return None


class _RedisSlot(Slot):
    def __init__(self, slots: RedisStreamSlots, key: str, member: str) -> None:
        self._slots: RedisStreamSlots | None = slots
        self._key = key
        self._member = member

    def release(self) -> None:
        if self._slots is not None:
            self._slots.forget(self._key, self._member)
            self._slots = None


class RedisStreamSlots(StreamSlots):
    """A sorted set of open streams per principal, kept alive by the replicas holding them.

    One keeper task per replica does every write after admission (refreshes and removals) in order, so a
    refresh can never bring back a stream whose removal was already sent.
    """

    def __init__(
        self, redis: Redis, cap: int, replica_id: str, ttl_s: float, role: str | None = None
    ) -> None:
        super().__init__(cap)
        self._prefix = STREAMS_PREFIX + (f"{role}:" if role else "")
        self._redis = redis
        self._replica_id = replica_id
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._refresh_s = ttl_s / 3
        self._acquire = redis.register_script(ACQUIRE_LUA)
        self._refresh = redis.register_script(REFRESH_LUA)
        self._held: dict[str, set[str]] = {}
        self._gone: list[tuple[str, str]] = []
        self._wake = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._health = _Health("stream cap")

    async def acquire(self, owner: str) -> Slot:
        if not self.cap:
            return _NoSlot()
        key = principal_key(self._prefix, owner)
        member = f"{self._replica_id}:{uuid.uuid4().hex}"
        if self._health.usable():
            try:
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    admitted, held = await self._acquire(keys=[key], args=[self.cap, self._ttl_ms, member])
            except REDIS_DOWN as exc:
                self._health.failed(exc)
                self._admit_locally(key, member)
            except BaseException:
                self.forget(key, member)  # the script may have run: remove it rather than wait the TTL
                raise
            else:
                self._health.ok()
                if not admitted:
                    raise too_many_streams(int(held), self.cap)
        else:
            self._admit_locally(key, member)
        self._held.setdefault(key, set()).add(member)
        return _RedisSlot(self, key, member)

    def _admit_locally(self, key: str, member: str) -> None:
        held = len(self._held.get(key, ()))
        if held >= self.cap:
            self.forget(key, member)
            raise too_many_streams(held, self.cap)

    def forget(self, key: str, member: str) -> None:
        """Stop holding a stream here; the keeper removes its entry from Redis."""
        members = self._held.get(key)
        if members is not None:
            members.discard(member)
            if not members:
                del self._held[key]
        self._gone.append((key, member))
        self._wake.set()

    async def start(self) -> None:
        if self.cap and self._keeper is None:
            self._keeper = asyncio.create_task(self._keep(), name="stream-slots-keeper")

    async def aclose(self) -> None:
        await background.stop(self._keeper)
        self._keeper = None
        self._gone.extend((k, m) for k, members in self._held.items() for m in members)
        self._held.clear()
        with contextlib.suppress(*REDIS_DOWN):
            async with asyncio.timeout(2):
                await self._remove_gone()
        self._gone.clear()

    async def _keep(self) -> None:
        due = time.monotonic() + self._refresh_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - time.monotonic())):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._remove_gone()
                if time.monotonic() >= due:
                    due = time.monotonic() + self._refresh_s
                    await self._refresh_held()
            except REDIS_DOWN as exc:
                self._health.failed(exc)

    async def _remove_gone(self) -> None:
        """ZREM closed streams; on failure they are dropped here and expire in Redis within the TTL."""
        batch, self._gone = self._gone, []
        if not batch:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, member in batch:
                pipe.zrem(key, member)
            await pipe.execute()

    async def _refresh_held(self) -> None:
        if not self._held:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, members in self._held.items():
                await self._refresh(keys=[key], args=[self._ttl_ms, *members], client=pipe)
            await pipe.execute()
        self._health.ok()
