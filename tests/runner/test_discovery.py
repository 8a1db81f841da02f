"""Discovery in process: the store of instances on both databases (refresh, age, forget, the lazy purge),
the `Discovery` component (registers at once, refreshes what runs, survives an outage, leaves on close),
and the listing `GET /agents` answers with (a configured role with no live instance is unavailable)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from app.api.endpoints.discovery import ROUTING_NOTE, listing, router as listing_router
from app.protocol.model import utcnow
from app.runner.discovery import Discovery, Instance
from app.store.db import create_engine
from app.store.instances import STALE_FACTOR, InstanceRecord, Instances
from app.store.models import AgentInstanceRow
from app.tasks.workers import Announcer
from tests.conftest import BACKENDS, migrated_database_url

WAIT_S = 10.0
"""A guard against a hang, never a timing assertion."""
MAX_AGE_S = 60.0


@pytest.fixture(params=BACKENDS)
async def store(request, tmp_path):
    url = await migrated_database_url(request.param, tmp_path)
    engine = create_engine(url)
    yield Instances(engine)
    await engine.dispose()


def record(role: str = "default", instance: str = "r1", **fields) -> InstanceRecord:
    values = {
        "kind": "replica",
        "description": f"the {role} agent",
        "card_url": f"http://x/agents/{role}/.well-known/agent-card.json",
        "capabilities": {"streaming": True},
        "slots": 4,
        "running": 0,
        **fields,
    }
    return InstanceRecord(role=role, instance_id=instance, **values)


def described(role: str, **fields) -> InstanceRecord:
    """A role as its card describes it (`wiring._describe`): no instance, kind or load yet."""
    return record(role, "", kind="worker", slots=0, **fields)


async def names(store: Instances, max_age_s: float = MAX_AGE_S) -> list[str]:
    return [i.name for i in await store.live(max_age_s)]


async def all_rows(store: Instances) -> int:
    async with store._engine.connect() as conn:
        return (await conn.execute(select(func.count()).select_from(AgentInstanceRow))).scalar_one()


async def test_upsert_lists_and_refreshes_one_row_per_name(store):
    await store.upsert([record("default", "r1"), record("reviewer", "r1", kind="worker")])
    before = {i.name: i for i in await store.live(MAX_AGE_S)}
    assert list(before) == ["default:r1", "reviewer:r1"]
    first = before["default:r1"]
    assert first.kind == "replica" and first.slots == 4 and first.running == 0 and first.free == 4
    assert first.capabilities == {"streaming": True} and first.card_url.endswith(
        "/default/.well-known/agent-card.json"
    )
    assert before["reviewer:r1"].kind == "worker"

    later = utcnow() + timedelta(seconds=5)
    await store.upsert([record("default", "r1", running=3, slots=4, description="now busier")], now=later)
    again = {i.name: i for i in await store.live(MAX_AGE_S, now=later)}
    assert again["default:r1"].running == 3 and again["default:r1"].free == 1
    assert again["default:r1"].description == "now busier"
    assert again["default:r1"].last_seen == later and first.last_seen is not None
    assert again["default:r1"].last_seen > first.last_seen
    assert await all_rows(store) == 2


async def test_an_instance_not_seen_within_the_max_age_is_hidden(store):
    now = utcnow()
    await store.upsert([record(instance="old")], now=now - timedelta(seconds=MAX_AGE_S + 1))
    await store.upsert([record(instance="fresh")], now=now - timedelta(seconds=MAX_AGE_S - 1))
    assert await names(store) == ["default:fresh"]
    # Refreshed, it is back.
    await store.upsert([record(instance="old")])
    assert await names(store) == ["default:fresh", "default:old"]


async def test_forget_removes_only_the_names_given(store):
    await store.upsert([record(instance="a"), record(instance="b"), record("reviewer", "a")])
    await store.forget(["default:a", "reviewer:a"])
    assert await names(store) == ["default:b"]
    await store.forget([])
    assert await names(store) == ["default:b"]


async def test_a_worker_that_left_is_not_listed_again_by_a_late_call_until_its_next_life(store):
    """The goodbye (`gone`) and a claim the worker sent before it are handled by two replicas: the claim's
    refresh (`seen`), handled after, lists nothing; the worker's next start (`hello`, its whoami) does."""
    template = described("coder")
    here, there = Announcer(store, template, 1.0), Announcer(store, template, 1.0)
    await here.seen("worker:box:vm1", 2, 0)
    assert await names(store) == ["coder:box:vm1"]
    await there.gone("worker:box:vm1")
    assert await names(store) == []
    here._last.clear()  # the late call is past the heartbeat throttle
    await here.seen("worker:box:vm1", 2, 1)
    assert await names(store) == [], "a call sent before the goodbye lists the worker again"
    await there.hello("worker:box:vm1")
    await here.seen("worker:box:vm1", 2, 0)
    [back] = await store.live(MAX_AGE_S)
    assert (back.name, back.running) == ("coder:box:vm1", 0), "the next life is listed"
    # A replica's own heartbeat is never held back by a mark: its rows are its own.
    await store.leave(["default:r1"])
    await store.upsert([record(instance="r1")])
    assert await names(store) == ["coder:box:vm1", "default:r1"]


async def test_purge_deletes_long_stale_rows_a_bounded_batch_at_a_time(store):
    now = utcnow()
    long_gone = now - timedelta(seconds=STALE_FACTOR * MAX_AGE_S + 5)
    await store.upsert([record(instance=f"gone-{n}") for n in range(5)], now=long_gone)
    # Stale but not long stale: hidden, kept (it may come back).
    await store.upsert([record(instance="stale")], now=now - timedelta(seconds=2 * MAX_AGE_S))
    await store.upsert([record(instance="live")])
    assert await all_rows(store) == 7

    assert await store.purge(STALE_FACTOR * MAX_AGE_S, limit=2) == 2
    assert await all_rows(store) == 5
    # The lazy purge (first call of this store object) takes the rest of the long stale ones.
    assert await store.purge_stale(MAX_AGE_S) == 3
    assert await all_rows(store) == 2
    assert await names(store) == ["default:live"]
    # And then not again within a maximum age, whatever piles up.
    await store.upsert([record(instance="gone-again")], now=long_gone)
    assert await store.purge_stale(MAX_AGE_S) == 0
    assert await all_rows(store) == 3


async def wait_for(condition, what: str):
    async with asyncio.timeout(WAIT_S):
        while not await condition():
            await asyncio.sleep(0.02)


async def test_discovery_registers_at_once_refreshes_running_and_forgets_on_close(store):
    running = 0
    roles = [
        Instance(described("default", capabilities={"a": 1}), slots=3, running=lambda: running),
        Instance(described("reviewer"), slots=1),
    ]
    discovery = Discovery(store, "replica", "host:1", heartbeat_s=0.05, max_age_s=MAX_AGE_S, instances=roles)
    assert discovery.names == ["default:host:1", "reviewer:host:1"]
    assert discovery.roles == ("default", "reviewer")
    await discovery.start()
    try:
        listed = await discovery.live()
        assert [i.name for i in listed] == ["default:host:1", "reviewer:host:1"]
        assert listed[0].kind == "replica" and listed[0].running == 0 and listed[0].slots == 3
        assert listed[0].started_at is not None

        running = 2

        async def refreshed():
            return (await discovery.live())[0].running == 2

        await wait_for(refreshed, "the next heartbeat")
        # Another process's instance shows in this one's listing.
        await store.upsert([record("reviewer", "elsewhere", kind="worker")])
        assert [i.name for i in await discovery.live()] == [
            "default:host:1",
            "reviewer:elsewhere",
            "reviewer:host:1",
        ]
    finally:
        await discovery.aclose()
    assert await names(store) == ["reviewer:elsewhere"]


class FlakyStore:
    """An `Instances` whose database is away (connection refused) until `back` is set."""

    def __init__(self, inner: Instances) -> None:
        self.inner = inner
        self.back = False
        self.refused = 0

    async def upsert(self, instances, now=None):
        if not self.back:
            self.refused += 1
            raise ConnectionRefusedError("database away")
        await self.inner.upsert(instances, now)

    async def purge_stale(self, max_age_s, now=None):
        return await self.inner.purge_stale(max_age_s, now)

    async def live(self, max_age_s, now=None):
        return await self.inner.live(max_age_s, now)

    async def forget(self, names):
        if not self.back:
            raise ConnectionRefusedError("database away")
        await self.inner.forget(names)


async def test_discovery_survives_an_outage_and_registers_when_the_database_is_back(store):
    flaky = FlakyStore(store)
    discovery = Discovery(
        flaky,  # type: ignore[arg-type]
        "worker",
        "w1",
        heartbeat_s=0.05,
        max_age_s=MAX_AGE_S,
        instances=[Instance(described("default"), slots=1)],
    )
    await discovery.start()  # does not fail, nor wait for the database
    try:

        async def retried():
            return flaky.refused >= 2

        await wait_for(retried, "a retry after the first refusal")
        assert await names(store) == []
        flaky.back = True

        async def registered():
            return await names(store) == ["default:w1"]

        await wait_for(registered, "the registration once the database is back")
        assert (await store.live(MAX_AGE_S))[0].kind == "worker"
    finally:
        await discovery.aclose()
    assert await names(store) == []


async def test_close_with_the_database_away_leaves_the_rows_to_age_out(store):
    flaky = FlakyStore(store)
    flaky.back = True
    discovery = Discovery(
        flaky,  # type: ignore[arg-type]
        "replica",
        "r9",
        heartbeat_s=30,
        max_age_s=MAX_AGE_S,
        instances=[Instance(described("default"))],
    )
    await discovery.start()
    flaky.back = False
    await discovery.aclose()  # logs, does not raise
    assert await names(store) == ["default:r9"]


def test_listing_shows_live_instances_and_every_configured_role():
    seen = utcnow()
    live = [
        record(
            "default",
            "a",
            slots=4,
            running=1,
            last_seen=seen,
            card_url="http://p/.well-known/agent-card.json",
        ),
        record(
            "default",
            "b",
            slots=4,
            running=4,
            last_seen=seen,
            card_url="http://p/.well-known/agent-card.json",
        ),
        record(
            "triager",
            "w1",
            kind="worker",
            slots=2,
            last_seen=seen,
            capabilities={"streaming": True, "skills": ["triage"]},
        ),
    ]
    skills = {"default": [{"id": "echo", "name": "Echo"}]}
    body = listing(live, ("default", "reviewer"), "http://p", skills)
    assert [a["name"] for a in body["agents"]] == ["default:a", "default:b", "triager:w1"]
    first = body["agents"][0]
    assert set(first) >= {
        "name",
        "role",
        "instance_id",
        "kind",
        "description",
        "card_url",
        "capabilities",
        "last_seen",
        "slots",
        "running",
        "free",
    }
    assert first["free"] == 3 and body["agents"][1]["free"] == 0
    assert first["last_seen"].endswith("Z")
    assert body["roles"] == [
        {
            "role": "default",
            "available": True,
            "instances": 2,
            "default": True,
            "card_url": "http://p/.well-known/agent-card.json",
            "skills": [{"id": "echo", "name": "Echo"}],
        },
        {
            "role": "reviewer",
            "available": False,
            "instances": 0,
            "default": False,
            "card_url": "http://p/agents/reviewer/.well-known/agent-card.json",
            "skills": [],
        },
        {
            "role": "triager",
            "available": True,
            "instances": 1,
            "default": False,
            "card_url": "http://x/agents/triager/.well-known/agent-card.json",
            "skills": [{"id": "triage"}],
        },
    ]
    assert body["routing_note"] == ROUTING_NOTE


class Away:
    """A discovery whose database is away."""

    roles = ("default",)

    async def live(self):
        raise ConnectionRefusedError("database away")


async def test_agents_answers_503_with_retry_after_while_the_database_is_away():
    app = FastAPI()
    app.include_router(listing_router)
    app.state.components = SimpleNamespace(
        discovery=Away(), roles=(), settings=SimpleNamespace(public_url="http://p")
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        resp = await client.get("/agents")
    assert resp.status_code == 503 and resp.headers["retry-after"]
    assert resp.json()["error"]["status"] == "UNAVAILABLE"
