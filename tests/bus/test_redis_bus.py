"""The Redis bus between two replicas, on a real Redis: events, control requests, the queue doorbell,
and a Redis restart turning into a resync instead of a silent loss."""

from __future__ import annotations

import asyncio
import os

import pytest

from app.bus.base import RESYNC
from app.bus.redis import RedisBus
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import TaskState, TaskStatus, now_iso
from tests.support.own_services import OwnServices

pytestmark = pytest.mark.skipif(
    not os.environ.get("TEST_REDIS_URL"), reason="TEST_REDIS_URL is not set: `make test` starts Redis"
)
WAIT_S = 30.0
"""A guard against a hang, never a timing assertion: every wait ends on its message long before."""


def record(seq: int, state: TaskState = TaskState.WORKING) -> EventRecord:
    return EventRecord(seq, StatusUpdate("t-1", "c-1", TaskStatus(state, now_iso()), final=state.terminal))


async def pair(url: str | None = None) -> tuple[RedisBus, RedisBus]:
    url = url or os.environ["TEST_REDIS_URL"]
    a, b = RedisBus(url, "replica-a"), RedisBus(url, "replica-b")
    await a.start()
    await b.start()
    return a, b


async def test_events_reach_the_other_replica_in_order():
    a, b = await pair()
    try:
        sub = await b.subscribe("t-1")
        local = await a.subscribe("t-1")
        await a.publish("t-1", "c-1", [record(1), record(2)])
        await a.publish("t-1", "c-1", [record(3, TaskState.COMPLETED)])
        got = [await asyncio.wait_for(sub.get(), WAIT_S) for _ in range(3)]
        assert [r.seq for r in got] == [1, 2, 3]
        assert got[2].event.status.state is TaskState.COMPLETED and got[2].event.final
        assert got[0].event.task_id == "t-1" and got[0].event.context_id == "c-1"
        mine = [await asyncio.wait_for(local.get(), WAIT_S) for _ in range(3)]
        assert [r.seq for r in mine] == [1, 2, 3], "the publisher's own subscribers, once each"
        await b.unsubscribe(sub)
        await a.unsubscribe(local)
    finally:
        await a.aclose()
        await b.aclose()


async def test_request_and_reply_between_replicas():
    a, b = await pair()
    try:

        async def handler(body):
            return {"echo": body["x"], "by": "replica-b"}

        b.on_control(handler)
        reply = await a.request("replica-b", {"x": 41}, WAIT_S)
        assert reply == {"echo": 41, "by": "replica-b"}
        with pytest.raises(TimeoutError):
            await a.request("replica-nobody", {"x": 1}, 0.3)
    finally:
        await a.aclose()
        await b.aclose()


async def test_queue_doorbell_rings_every_replica():
    a, b = await pair()
    rung = {"a": asyncio.Event(), "b": asyncio.Event()}
    a.on_queued(rung["a"].set)
    b.on_queued(rung["b"].set)
    try:
        await a.ring_queue()
        await asyncio.wait_for(rung["a"].wait(), WAIT_S)
        await asyncio.wait_for(rung["b"].wait(), WAIT_S)
    finally:
        await a.aclose()
        await b.aclose()


async def test_redis_restart_makes_subscribers_resync_and_resends_what_failed():
    own = OwnServices()  # a Redis of this test alone: the shared one serves every other test
    await asyncio.to_thread(own.start_redis)
    try:
        a, b = await pair(own.redis_url)
        try:
            sub = await b.subscribe("t-1")
            await a.publish("t-1", "c-1", [record(1)])
            assert (await asyncio.wait_for(sub.get(), WAIT_S)).seq == 1
            # Blocking the loop (as before): the buses find Redis restarted on their next call.
            own.restart_redis()
            # While the bus reconnects, a publish may fail; it is re-sent once Redis is back.
            await a.publish("t-1", "c-1", [record(2, TaskState.COMPLETED)])
            seen = []
            async with asyncio.timeout(WAIT_S):
                while not any(r is not RESYNC and r.seq == 2 for r in seen):
                    seen.append(await sub.get())
            assert RESYNC in seen, "the reconnect told the reader to re-read the log"
        finally:
            await a.aclose()
            await b.aclose()
    finally:
        await asyncio.to_thread(own.stop_redis)
