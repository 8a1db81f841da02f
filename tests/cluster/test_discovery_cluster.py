"""Discovery across replicas on one database: every replica (and nginx) lists every live instance; a killed
replica drops out within the maximum age, a stopped one at once, and a restarted one is listed again."""

from __future__ import annotations

import asyncio

import httpx

from app.store.db import create_engine
from app.store.instances import Instances
from tests.conftest import ClusterFactory

WAIT_S = 60.0
"""A guard against a hang, never a timing assertion: every wait ends on its condition."""


async def listed(url: str) -> set[str]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        resp = await client.get("/agents")
        assert resp.status_code == 200, resp.text
        return {a["name"] for a in resp.json()["agents"]}


async def rows(database_url: str) -> set[str]:
    """The names in the table, however old: what a clean shutdown removed and a kill left."""
    engine = create_engine(database_url)
    try:
        return {i.name for i in await Instances(engine).live(max_age_s=3600)}
    finally:
        await engine.dispose()


async def until_listed(url: str, names: set[str]) -> None:
    """Once `url` lists exactly `names`; failing with what it listed last."""
    last: set[str] = set()
    try:
        async with asyncio.timeout(WAIT_S):
            while (last := await listed(url)) != names:
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(
            f"{url} lists {sorted(last)}, not {sorted(names)}, after {WAIT_S:.0f}s"
        ) from None


async def test_replicas_list_each_other_and_drop_the_dead(cluster_factory: ClusterFactory):
    # The maximum age only sets how long the killed replica's drop-out is waited for; it is long enough that a
    # busy machine's stalled heartbeat never drops a live replica.
    cluster = await cluster_factory(replicas=2, DISCOVERY_HEARTBEAT_S="0.3", DISCOVERY_MAX_AGE_S="10")
    both = {"default:a2a-1", "default:a2a-2"}
    for url in (*cluster.urls, cluster.nginx_url):  # ready does not mean registered: wait for it
        await until_listed(url, both)
    async with httpx.AsyncClient(base_url=cluster.nginx_url, timeout=10) as client:
        body = (await client.get("/agents")).json()
    assert {a["kind"] for a in body["agents"]} == {"replica"}
    # Behind one PUBLIC_URL, both instances of the role advertise the same card: send to the role.
    card_url = f"{cluster.nginx_url}/agents/default/.well-known/agent-card.json"
    assert {a["card_url"] for a in body["agents"]} == {card_url}
    (role,) = body["roles"]
    assert role == {
        "role": "default",
        "available": True,
        "instances": 2,
        "default": True,
        "card_url": card_url,
        "skills": role["skills"],
    }
    assert [s["id"] for s in role["skills"]] == ["script"]

    # Killed: no goodbye; the survivor stops listing it once it is older than the maximum age.
    await asyncio.to_thread(cluster.kill, 1)
    assert await rows(cluster.database_url) == both
    await until_listed(cluster.urls[0], {"default:a2a-1"})

    # Restarted: listed again under the same name.
    await asyncio.to_thread(cluster.start_replica, 1)
    await until_listed(cluster.urls[0], both)

    # Stopped cleanly: gone at once, before any maximum age could pass.
    await asyncio.to_thread(cluster.terminate, 1, True)
    assert await rows(cluster.database_url) == {"default:a2a-1"}, cluster.log(1)[-3000:]
    assert await listed(cluster.urls[0]) == {"default:a2a-1"}
