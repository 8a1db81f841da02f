"""Cluster-wide limits on a real Redis: the task rate (GCRA in one Lua call) and the open-stream cap hold
across replicas, a killed replica's streams stop counting after the TTL, and an unreachable Redis never
fails a request (each process falls back to its own counts).

Principals get fresh names per run: their Redis keys outlive a test (a rate key lasts until the bucket is
full again), so reused names would meet the previous run's counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from app.api.edge.auth import hash_key
from app.limits.redis import STREAMS_PREFIX, RedisStreamSlots, RedisTaskRate, principal_key
from app.protocol.errors import RateLimitedError, TooManyStreamsError
from tests.conftest import ClusterFactory
from tests.support.cluster import Cluster
from tests.support.rpc import text_message
from tests.support.server import free_port

pytestmark = pytest.mark.skipif(
    not os.environ.get("TEST_REDIS_URL"), reason="TEST_REDIS_URL is not set: `make test` starts Redis"
)

V10 = {"A2A-Version": "1.0"}
TTL_S = 2
"""The in-process limiters' slot TTL (their Redis is unreachable: it never runs out there)."""
KILLED_TTL_S = 10
"""The stream slots' TTL of the one cluster test that waits for a killed replica's entries to expire. The
others keep the default (30 s): a live replica refreshes its entries every TTL/3, and a refresh a busy
machine delays past a short TTL would let another replica admit a stream the cap should refuse."""
WAIT_S = 60.0
"""A guard against a hang, never a timing assertion: every wait ends on its condition."""
LIMITS_ENV = {
    "TASK_RATE_PER_MIN": "1",
    "TASK_RATE_BURST": "3",
    "MAX_STREAMS_PER_PRINCIPAL": "2",
}


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class Principals:
    """API keys for a few freshly named principals: the replicas' settings and each one's headers."""

    def __init__(self, *names: str) -> None:
        self.keys = {name: uuid.uuid4().hex for name in names}

    def env(self) -> dict[str, str]:
        return {
            "AUTH_MODE": "required",
            "API_KEYS": json.dumps({hash_key(k): name for name, k in self.keys.items()}),
        }

    def headers(self, name: str) -> dict[str, str]:
        return {"X-API-Key": self.keys[name]}


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(os.environ["TEST_REDIS_URL"])
    yield client
    await client.aclose()


# ---- the Redis implementations in process ---------------------------------------------------------


async def test_rate_is_shared_by_every_replica_with_the_token_bucket_semantics(redis):
    a, b = RedisTaskRate(redis, 60, 3), RedisTaskRate(redis, 60, 3)
    who = fresh("p")
    for rate in (a, b, a):
        await rate.take(who)
    for rate in (a, b):
        with pytest.raises(RateLimitedError) as refused:
            await rate.take(who)
        assert refused.value.data == {"retryAfter": 1}, "one task a second: the next token within 1 s"
    await b.take(fresh("other"))

    slow = RedisTaskRate(redis, 1, 1)
    who = fresh("p")
    await slow.take(who)
    with pytest.raises(RateLimitedError) as refused:
        await slow.take(who)
    assert 1 <= refused.value.data["retryAfter"] <= 60


async def test_unlimited_rate_and_streams_never_touch_redis():
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    rate, slots = RedisTaskRate(unreachable, 0, 1), RedisStreamSlots(unreachable, 0, "r", TTL_S)
    for _ in range(5):
        await rate.take("p")
        (await slots.acquire("p")).release()
    await unreachable.aclose()


async def test_unreachable_redis_fails_open_to_this_process_counts(caplog):
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    rate = RedisTaskRate(unreachable, 1, 2)
    slots = RedisStreamSlots(unreachable, 1, "r", TTL_S)
    await slots.start()
    with caplog.at_level(logging.WARNING, logger="app.limits.redis"):
        await rate.take("p")
        await rate.take("p")
        with pytest.raises(RateLimitedError):
            await rate.take("p")
        held = await slots.acquire("p")
        with pytest.raises(TooManyStreamsError):
            await slots.acquire("p")
        held.release()
        (await slots.acquire("p")).release()
    warnings = [r.getMessage() for r in caplog.records if "redis unreachable" in r.getMessage()]
    assert len(warnings) == 2, "one warning per limiter and outage, not one per request"
    await slots.aclose()
    await unreachable.aclose()


async def test_closing_the_limiter_gives_back_every_stream_it_holds(redis):
    who = fresh("p")
    key = principal_key(STREAMS_PREFIX, who)
    a, b = RedisStreamSlots(redis, 3, "ra", 60), RedisStreamSlots(redis, 3, "rb", 60)
    await a.start()
    await b.start()
    await a.acquire(who)
    await a.acquire(who)
    on_b = await b.acquire(who)
    with pytest.raises(TooManyStreamsError):
        await b.acquire(who)
    assert await redis.zcard(key) == 3
    await a.aclose()
    members = await redis.zrange(key, 0, -1)
    assert len(members) == 1 and members[0].startswith(b"rb:"), "the holder replica is in each entry"
    on_b.release()
    await b.aclose()
    assert await redis.zcard(key) == 0


# ---- a real cluster ---------------------------------------------------------------------------------


def send_body(text: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": text_message(text)}}


def resubscribe_body(task_id: str) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tasks/resubscribe", "params": {"id": task_id}}


async def start(cluster_factory: ClusterFactory, people: Principals) -> Cluster:
    return await cluster_factory(replicas=2, **people.env(), **LIMITS_ENV)


@contextlib.asynccontextmanager
async def clients(cluster: Cluster, headers: dict[str, str]) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One client per replica, straight to it (not through nginx), so each call's replica is known."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, headers=headers, timeout=15))
            for url in cluster.urls
        ]


async def waiting_task(client: httpx.AsyncClient) -> str:
    """A task that stays open (input-required), to hold streams on."""
    task = (await client.post("/a2a/jsonrpc", json=send_body("ask:wait?"))).json()["result"]
    assert task["status"]["state"] == "input-required"
    return task["id"]


class OpenStreams:
    """SSE streams held open until `close`; closing tolerates a replica that was killed meanwhile."""

    def __init__(self) -> None:
        self._open: list[contextlib.AbstractAsyncContextManager[httpx.Response]] = []

    async def open(self, client: httpx.AsyncClient, task_id: str) -> None:
        assert await self.try_open(client, task_id)

    async def try_open(self, client: httpx.AsyncClient, task_id: str) -> bool:
        """Open a stream and keep it if admitted; False (nothing kept) on 429."""
        cm = client.stream("POST", "/a2a/jsonrpc", json=resubscribe_body(task_id))
        resp = await cm.__aenter__()
        if resp.status_code == 429:
            await cm.__aexit__(None, None, None)
            return False
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        self._open.append(cm)
        return True

    async def admitted_within(
        self, client: httpx.AsyncClient, task_id: str, within_s: float = WAIT_S
    ) -> bool:
        """Poll until a stream is admitted and keep it (the server notices a disconnect, or an entry
        expires, some time after the event that frees the slot); False if not within `within_s`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while not await self.try_open(client, task_id):
                    await asyncio.sleep(0.1)
                return True
        return False

    async def close_one(self) -> None:
        with contextlib.suppress(httpx.HTTPError):
            await self._open.pop().__aexit__(None, None, None)

    async def close(self) -> None:
        while self._open:
            await self.close_one()


async def stream_status(client: httpx.AsyncClient, task_id: str) -> int:
    async with client.stream("POST", "/a2a/jsonrpc", json=resubscribe_body(task_id)) as resp:
        return resp.status_code


async def test_task_rate_is_cluster_wide(cluster_factory: ClusterFactory):
    """Burst 3 at 1 a minute, spread over two replicas: the 4th creation is refused on either one."""
    people = Principals(alice := fresh("alice"), bob := fresh("bob"))
    cluster = await start(cluster_factory, people)
    async with clients(cluster, people.headers(alice)) as (a, b):
        for replica in (a, b, a):
            resp = await replica.post("/a2a/jsonrpc", json=send_body("say:x"))
            assert resp.status_code == 200 and "result" in resp.json()
        for replica in (b, a):
            resp = await replica.post("/a2a/jsonrpc", json=send_body("say:x"))
            assert resp.status_code == 429 and resp.json()["error"]["code"] == -32092
            assert 1 <= int(resp.headers["retry-after"]) <= 60
        rest = await b.post(
            "/a2a/rest/message:send",
            json={"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "x"}]}},
            headers=V10,
        )
        assert rest.status_code == 429 and 1 <= int(rest.headers["retry-after"]) <= 60
    async with clients(cluster, people.headers(bob)) as (_, b):
        resp = await b.post("/a2a/jsonrpc", json=send_body("say:mine"))
        assert resp.status_code == 200 and "result" in resp.json()


async def test_stream_cap_is_cluster_wide(cluster_factory: ClusterFactory):
    """Two streams on replica A fill the cap of 2: B refuses a third; once one closes, B admits it."""
    people = Principals(bob := fresh("bob"), carol := fresh("carol"))
    cluster = await start(cluster_factory, people)
    streams = OpenStreams()
    async with clients(cluster, people.headers(bob)) as (a, b):
        task_id = await waiting_task(a)
        try:
            await streams.open(a, task_id)
            await streams.open(a, task_id)
            refused = await b.post("/a2a/jsonrpc", json=resubscribe_body(task_id))
            assert refused.status_code == 429 and refused.json()["error"]["code"] == -32094
            rest = await b.get(f"/a2a/rest/tasks/{task_id}:subscribe", headers=V10)
            assert rest.status_code == 429

            await streams.close_one()
            assert await streams.admitted_within(b, task_id), "a closed stream gives its slot back"
            assert await stream_status(a, task_id) == 429, "one on A and one on B fill the cap again"
        finally:
            await streams.close()
    async with clients(cluster, people.headers(carol)) as (a, _):
        other = await waiting_task(a)
        assert await stream_status(a, other) == 200, "the cap is per principal"


async def test_a_killed_replicas_streams_stop_counting_after_the_ttl(cluster_factory: ClusterFactory):
    people = Principals(dave := fresh("dave"))
    cluster = await cluster_factory(
        replicas=2, **people.env(), **LIMITS_ENV, STREAM_SLOT_TTL_S=str(KILLED_TTL_S)
    )
    streams = OpenStreams()
    async with clients(cluster, people.headers(dave)) as (a, b):
        task_id = await waiting_task(b)
        try:
            await streams.open(a, task_id)
            await streams.open(a, task_id)
            assert await stream_status(b, task_id) == 429
            cluster.kill(0)
            # Nothing removes A's entries: they expire KILLED_TTL_S after A's last refresh.
            assert await streams.admitted_within(b, task_id, KILLED_TTL_S + WAIT_S)
        finally:
            await streams.close()


async def test_a_stopped_replica_gives_its_streams_back_at_once(cluster_factory: ClusterFactory, redis):
    """SIGTERM: the replica removes its own entries as it shuts down, long before their expiry."""
    people = Principals(erin := fresh("erin"))
    cluster = await cluster_factory(replicas=2, **people.env(), **{**LIMITS_ENV, "STREAM_SLOT_TTL_S": "600"})
    streams = OpenStreams()
    async with clients(cluster, people.headers(erin)) as (a, b):
        task_id = await waiting_task(b)
        try:
            await streams.open(a, task_id)
            await streams.open(a, task_id)
            assert await stream_status(b, task_id) == 429
            await asyncio.to_thread(cluster.terminate, 0, True)
            held = await redis.zrange(principal_key(STREAMS_PREFIX, erin), 0, -1)
            assert not [m for m in held if m.startswith(b"a2a-1:")]
            await streams.open(b, task_id)
        finally:
            await streams.close()
