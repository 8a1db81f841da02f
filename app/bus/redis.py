"""The scaled-out bus: Redis pub/sub between replicas.

Channels: `a2a:task:<id>` carries a task's committed events to every replica with a subscriber,
`a2a:replica:<id>` carries control requests and replies to one replica, `a2a:queue` rings every replica
when a task waits to be claimed. One pub/sub connection per replica subscribes to what local readers need.

Pub/sub is lossy by design, so nothing relies on it alone: a replica's own subscribers are served in
process, publishes that fail while Redis is away are re-sent when it is back, and every subscription is
told to re-read the event log after a reconnect (its reader fills any gap by sequence number).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from app import background
from app.protocol.events import EventRecord, event_from_store, event_kind
from app.telemetry import traces

from .base import Bus, publish_attributes

log = logging.getLogger(__name__)

TASK_PREFIX = "a2a:task:"
REPLICA_PREFIX = "a2a:replica:"
QUEUE_CHANNEL = "a2a:queue"
_OUTBOX_LIMIT = 10_000


class RedisBus(Bus):
    hears_others = True

    def __init__(self, url: str, replica_id: str) -> None:
        super().__init__(replica_id)
        self._redis = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        self._control_channel = REPLICA_PREFIX + replica_id
        self._pubsub: PubSub | None = None
        self._confirm: dict[str, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._outbox: list[tuple[str, bytes]] = []
        self._to_publish: list[tuple[str, bytes, bool]] = []
        self._publish_wake = asyncio.Event()
        self._publisher: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._publish_failing = False

    async def start(self) -> None:
        self._reader = asyncio.create_task(self._read_forever(), name="redis-bus")
        self._publisher = asyncio.create_task(self._publish_forever(), name="redis-publisher")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), 5)

    @property
    def client(self) -> Redis:
        """The connection pool, for other shared state (the cluster-wide limits) to reuse."""
        return self._redis

    async def ping(self) -> None:
        await self._redis.ping()

    async def aclose(self) -> None:
        await super().aclose()
        if self._publisher is not None:
            await background.stop(self._publisher)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await self._send_queued()  # the last events (e.g. tasks ended at shutdown)
        await background.stop(self._reader)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
        await self._redis.aclose()

    # ---- publishing ----------------------------------------------------------------------------

    async def publish(self, task_id: str, context_id: str, records: list[EventRecord]) -> None:
        with traces.span("bus.publish", attributes=publish_attributes(task_id, records)):
            self._deliver(task_id, records)
            payload = orjson.dumps(
                {
                    "from": self.replica_id,
                    "c": context_id,
                    "r": [[r.seq, event_kind(r.event), r.event.to_store()] for r in records],
                }
            )
            await self._publish(TASK_PREFIX + task_id, payload)

    async def _send(self, replica_id: str, payload: dict[str, Any]) -> None:
        if replica_id == self.replica_id:
            await self._on_control_message(payload)
            return
        await self._publish(REPLICA_PREFIX + replica_id, orjson.dumps(payload), keep=False)

    async def ring_queue(self) -> None:
        self._wake_queue()
        await self._publish(QUEUE_CHANNEL, orjson.dumps({"from": self.replica_id}), keep=False)

    async def _publish(self, channel: str, payload: bytes, keep: bool = True) -> None:
        """Queue a publish for the publisher task: callers never wait on Redis, and what piles up
        meanwhile goes out in one pipelined round trip, in order."""
        self._to_publish.append((channel, payload, keep))
        self._publish_wake.set()

    async def _publish_forever(self) -> None:
        """Send queued publishes; while Redis is away, keep event payloads to re-send once it is back."""
        while True:
            await self._publish_wake.wait()
            self._publish_wake.clear()
            await self._send_queued()

    async def _send_queued(self) -> None:
        while self._to_publish:
            batch = self._to_publish[:512]
            del self._to_publish[:512]
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for channel, payload, _ in batch:
                        pipe.publish(channel, payload)
                    await pipe.execute()
                self._publish_failing = False
            except (RedisError, OSError) as exc:
                if not self._publish_failing:  # one line per outage; the reader logs the reconnect
                    log.warning("redis publishes failing (%s); kept to re-send once it is back", exc)
                self._publish_failing = True
                for channel, payload, keep in batch:
                    if keep and len(self._outbox) < _OUTBOX_LIMIT:
                        self._outbox.append((channel, payload))

    async def _flush_outbox(self) -> None:
        while self._outbox:
            channel, payload = self._outbox[0]
            await self._redis.publish(channel, payload)
            self._outbox.pop(0)

    # ---- subscribing ---------------------------------------------------------------------------

    async def _listen(self, task_id: str) -> None:
        ps = self._pubsub
        if ps is None:
            return  # the reader subscribes every wanted channel when it (re)connects
        channel = TASK_PREFIX + task_id
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._confirm[channel] = fut
        try:
            await ps.subscribe(channel)
            await asyncio.wait_for(fut, 2)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("redis subscribe to %s not confirmed: %s", channel, exc)
        finally:
            self._confirm.pop(channel, None)

    async def _unlisten(self, task_id: str) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.unsubscribe(TASK_PREFIX + task_id)

    async def _read_forever(self) -> None:
        delay = 0.05
        first = True
        while True:
            ps = self._redis.pubsub()
            try:
                channels = [self._control_channel, QUEUE_CHANNEL, *(TASK_PREFIX + t for t in self._subs)]
                await ps.subscribe(*channels)
                self._pubsub = ps
                await self._flush_outbox()
                self._connected.set()
                if not first:
                    log.info("redis bus reconnected; subscribers re-read the event log")
                    self._resync_all()
                    self._wake_queue()
                first = False
                delay = 0.05
                async for msg in ps.listen():
                    await self._dispatch(msg)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                if self._connected.is_set():
                    log.warning("redis bus lost its connection: %s", exc)
                self._connected.clear()
                self._pubsub = None
                with contextlib.suppress(Exception):
                    await ps.aclose()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = msg.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if kind == "subscribe":
            fut = self._confirm.get(channel)
            if fut is not None and not fut.done():
                fut.set_result(None)
            return
        if kind != "message":
            return
        data = orjson.loads(msg["data"])
        if channel.startswith(TASK_PREFIX):
            if data.get("from") == self.replica_id:
                return
            task_id = channel[len(TASK_PREFIX) :]
            ctx = data["c"]
            records = [
                EventRecord(seq, event_from_store(task_id, ctx, kind_, body))
                for seq, kind_, body in data["r"]
            ]
            self._deliver(task_id, records)
        elif channel == QUEUE_CHANNEL:
            if data.get("from") != self.replica_id:
                self._wake_queue()
        elif channel == self._control_channel:
            await self._on_control_message(data)
