"""`GET /agents` on a real server, both databases: it lists this replica's instance of the role `default`
with its slots and running agents, an instance nobody refreshes drops out after the maximum age, a clean
shutdown removes the replica's entry at once, and without a credential the listing is refused."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.agents.echo import EchoAgent
from app.agents.scripted import ScriptedAgent
from app.api.endpoints.discovery import ROUTING_NOTE
from app.protocol.model import parse_iso
from app.store.db import create_engine
from app.store.instances import InstanceRecord, Instances
from tests.conftest import BACKENDS, make_server
from tests.support.auth import key_of
from tests.support.rpc import result, send

WAIT_S = 60.0
"""A guard against a hang, never a timing assertion: every wait ends on its condition."""
SCRIPT_SKILLS, ECHO_SKILLS = (
    [{"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags)} for s in a.skills]
    for a in (ScriptedAgent, EchoAgent)
)
"""A role's skills as GET /agents lists them: its card's."""
SHORT = {"DISCOVERY_HEARTBEAT_S": "0.2", "DISCOVERY_MAX_AGE_S": "10"}
"""Fast heartbeats; the maximum age only sets how long the ghost's drop-out is waited for, and is long enough
that a busy machine's stalled heartbeat never drops a live server's own entry."""


async def agents(client: httpx.AsyncClient) -> dict:
    resp = await client.get("/agents")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    return resp.json()


async def until(client: httpx.AsyncClient, condition) -> dict:
    """The listing once `condition(listing)` holds."""
    async with asyncio.timeout(WAIT_S):
        while True:
            body = await agents(client)
            if condition(body):
                return body
            await asyncio.sleep(0.05)


def by_name(body: dict) -> dict[str, dict]:
    return {a["name"]: a for a in body["agents"]}


def running(body: dict, name: str) -> int | None:
    """The running agents `name` is listed with (None: not listed now)."""
    return by_name(body).get(name, {}).get("running")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_agents_lists_this_replica_its_load_and_drops_what_is_not_refreshed(backend, tmp_path):
    srv = await make_server(backend, tmp_path, REPLICA_ID="disc-1", MAX_CONCURRENT_TASKS="3", **SHORT)
    engine = create_engine(srv.database_url)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            # Ready does not mean listed: start-up waits for the first registration only so long.
            body = await until(client, lambda b: "default:disc-1" in by_name(b))
            assert body["routing_note"] == ROUTING_NOTE
            (me,) = body["agents"]
            assert (
                me["name"] == "default:disc-1" and me["role"] == "default" and me["instance_id"] == "disc-1"
            )
            assert me["kind"] == "replica"
            assert me["card_url"] == f"http://localhost:{srv.port}/agents/default/.well-known/agent-card.json"
            assert me["description"] == "Follows a script in the message text; used by the test suite."
            assert me["capabilities"]["adapter"] == "scripted" and me["capabilities"]["skills"] == ["script"]
            assert (me["slots"], me["running"], me["free"]) == (3, 0, 3)
            assert me["last_seen"].endswith("Z") and me["started_at"] <= me["last_seen"]
            assert body["roles"] == [
                {
                    "role": "default",
                    "available": True,
                    "instances": 1,
                    "default": True,
                    "card_url": me["card_url"],
                    "skills": SCRIPT_SKILLS,
                }
            ]

            # A running agent shows at the next heartbeat, and is gone once it ends.
            task = await send(client, "sleep:600", blocking=False)
            await until(client, lambda b: running(b, "default:disc-1") == 1)
            assert by_name(await agents(client))["default:disc-1"]["free"] == 2
            await result(client, "tasks/cancel", {"id": task["id"]})
            await until(client, lambda b: running(b, "default:disc-1") == 0)

            # An instance that registers once and is never refreshed (a worker that died) is listed, then
            # drops out after the maximum age; this replica, refreshing, stays.
            ghost = InstanceRecord(
                role="default",
                instance_id="ghost",
                kind="worker",
                description="gone soon",
                card_url=me["card_url"],
                slots=1,
            )
            await Instances(engine).upsert([ghost])
            body = await agents(client)
            assert set(by_name(body)) == {"default:disc-1", "default:ghost"}
            assert by_name(body)["default:ghost"]["kind"] == "worker"
            assert body["roles"][0]["instances"] == 2
            body = await until(client, lambda b: "default:ghost" not in by_name(b))
            assert list(by_name(body)) == ["default:disc-1"]
            assert body["roles"] == [
                {
                    "role": "default",
                    "available": True,
                    "instances": 1,
                    "default": True,
                    "card_url": me["card_url"],
                    "skills": SCRIPT_SKILLS,
                }
            ]

        # A clean shutdown removes the entry at once (the rows, not only the listing: nothing ages here).
        srv.stop(must_be_graceful=True)
        left = await Instances(engine).live(max_age_s=3600)
        assert [i.name for i in left] == ["default:ghost"], srv.log_tail()
    finally:
        srv.stop()
        await engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_killed_replica_is_listed_until_its_entry_ages_out(backend, tmp_path):
    """No goodbye (kill -9): the entry stays, and a restarted replica refreshes it under the same name."""
    srv = await make_server(backend, tmp_path, REPLICA_ID="disc-2", **SHORT)
    engine = create_engine(srv.database_url)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            await until(client, lambda b: "default:disc-2" in by_name(b))  # the first life registered
        srv.kill()
        left = await Instances(engine).live(max_age_s=3600)
        assert [i.name for i in left] == ["default:disc-2"]
        assert left[0].started_at is not None
        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            # The new life's entry, once it has written it: the same name, started after the first.
            body = await until(
                client,
                lambda b: any(parse_iso(a["started_at"]) > left[0].started_at for a in b["agents"]),
            )
            (me,) = body["agents"]
            assert me["name"] == "default:disc-2"
    finally:
        srv.stop()
        await engine.dispose()


async def test_agents_needs_a_credential(auth_server):
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=30) as client:
        refused = await client.get("/agents")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith('Bearer realm="a2a"')
        assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=30, headers=key_of("alice")) as alice:
        listed = await until(alice, lambda b: b["agents"] != [])  # once the shared server has registered
        assert [a["role"] for a in listed["agents"]] == ["default"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_one_instance_per_role_run_here_and_a_role_run_nowhere_is_unavailable(backend, tmp_path):
    agents_env = {
        "reviewer": {"adapter": "scripted", "slots": 2, "card": {"name": "Reviewer"}},
        "triager": {"adapter": "echo", "card": {"name": "Triager", "description": "Sorts issues."}},
        "coder": {"adapter": "echo", "model": "big-one"},
    }
    srv = await make_server(
        backend,
        tmp_path,
        REPLICA_ID="disc-3",
        AGENTS=json.dumps(agents_env),
        AGENT_ROLES="reviewer,triager",
        **SHORT,
    )
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            body = await until(client, lambda b: len(b["agents"]) == 2)  # both roles' entries written
            public = f"http://localhost:{srv.port}"
            listed = by_name(body)
            assert list(listed) == ["reviewer:disc-3", "triager:disc-3"]
            reviewer, triager = listed["reviewer:disc-3"], listed["triager:disc-3"]
            # The first role is the default one (the root's too): its card is under its name like any role's.
            assert reviewer["card_url"] == f"{public}/agents/reviewer/.well-known/agent-card.json"
            assert reviewer["capabilities"]["agent"] == "Reviewer" and reviewer["slots"] == 2
            assert triager["card_url"] == f"{public}/agents/triager/.well-known/agent-card.json"
            assert triager["description"] == "Sorts issues." and triager["capabilities"]["adapter"] == "echo"
            card = await client.get(triager["card_url"].removeprefix(public))
            assert card.status_code == 200 and card.json()["name"] == "Triager"
            assert body["roles"] == [
                {
                    "role": "reviewer",
                    "available": True,
                    "instances": 1,
                    "default": True,
                    "card_url": reviewer["card_url"],
                    "skills": SCRIPT_SKILLS,
                },
                {
                    "role": "triager",
                    "available": True,
                    "instances": 1,
                    "default": False,
                    "card_url": triager["card_url"],
                    "skills": ECHO_SKILLS,
                },
                {
                    "role": "coder",
                    "available": False,
                    "instances": 0,
                    "default": False,
                    "card_url": f"{public}/agents/coder/.well-known/agent-card.json",
                    "skills": ECHO_SKILLS,
                },
            ]
            # A role run nowhere still has its card here: every replica serves every role.
            assert (await client.get("/agents/coder/.well-known/agent-card.json")).status_code == 200
    finally:
        srv.stop()
