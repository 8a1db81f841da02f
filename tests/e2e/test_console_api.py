"""The console's read API (`/console/api/...`) on both databases: scoped to the caller exactly as the task
API is (admins in CONSOLE_ADMINS excepted), keyset pages that cross roles, filters, a bounded window for
the filters no index serves, and bad input refused with 400 and nothing changed."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS, make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.rpc import start_v10
from tests.support.server import ServerProcess

AGENTS = {
    "default": {"adapter": "scripted", "model": "big-model", "models": ["small-model"]},
    "second": {"adapter": "echo"},
}


@pytest.fixture(scope="module", params=BACKENDS)
async def srv(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    s = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"console-api-{request.param}"),
        **api_keys_env(AGENTS=json.dumps(AGENTS), CONSOLE_ADMINS="carol"),
    )
    yield s
    s.stop()


async def send(
    c: httpx.AsyncClient, text: str, who: str = "alice", path: str = "", **message: Any
) -> dict[str, Any]:
    return await start_v10(str(c.base_url).rstrip("/"), text, key_of(who), path, wait=True, **message)


async def listing(c: httpx.AsyncClient, who: str = "alice", **query: str) -> dict[str, Any]:
    resp = await c.get("/console/api/tasks", params=query, headers=key_of(who))
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_me_names_the_principal_roles_and_admin(srv: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        alice = (await c.get("/console/api/me", headers=key_of("alice"))).json()
        carol = (await c.get("/console/api/me", headers=key_of("carol"))).json()
        refused = await c.get("/console/api/me")
    assert alice == {
        "principal": "alice",
        "admin": False,
        "authenticated": True,
        "roles": [
            {"name": "default", "path": "/agents/default", "default": True, "requiredExtensions": []},
            {"name": "second", "path": "/agents/second", "default": False, "requiredExtensions": []},
        ],
    }
    assert carol["admin"] is True
    assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers


async def test_pages_cross_roles_and_follow_the_keyset(srv: ServerProcess) -> None:
    mark = uuid.uuid4().hex[:10]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        made = [await send(c, f"page-{mark}-{i}") for i in range(5)]
        made.append(await send(c, f"page-{mark}-echo", path="/agents/second"))
        first = await listing(c, q=f"page-{mark}", limit="4")
        second = await listing(c, q=f"page-{mark}", limit="4", cursor=first["nextCursor"])
        changed = await listing(c, q=f"page-{mark}", changedAfter=first["tasks"][0]["statusAt"])
    ids = [t["id"] for t in first["tasks"] + second["tasks"]]
    assert sorted(ids) == sorted(t["id"] for t in made) and len(set(ids)) == 6
    assert first["nextCursor"] and second["nextCursor"] == ""
    keys = [(t["statusAt"], t["id"]) for t in first["tasks"] + second["tasks"]]
    assert keys == sorted(keys, reverse=True), "newest status first"
    roles = {t["title"]: t["role"] for t in first["tasks"] + second["tasks"]}
    assert roles[f"page-{mark}-echo"] == "second" and roles[f"page-{mark}-0"] == "default"
    assert changed["tasks"] == [], "nothing changed after the newest status"


async def test_a_task_shows_its_role_the_skill_it_asked_for_and_its_model(srv: ServerProcess) -> None:
    mark = uuid.uuid4().hex[:10]
    asked = {"skill": "script", "model": "small-model"}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        chosen = await send(c, f"say:options-{mark}", metadata=asked)
        plain = await send(c, f"options-{mark}-echo", path="/agents/second")
        lines = {t["id"]: t for t in (await listing(c, q=f"options-{mark}"))["tasks"]}
        page = (await c.get(f"/console/api/tasks/{chosen['id']}", headers=key_of("alice"))).json()
    assert {k: lines[chosen["id"]][k] for k in ("role", "skill", "model")} == {"role": "default", **asked}
    assert {k: lines[plain["id"]][k] for k in ("role", "skill", "model")} == {
        "role": "second",
        "skill": None,
        "model": None,
    }
    assert page["role"] == "default"
    assert (
        page["task"]["metadata"]["skill"] == "script" and page["task"]["metadata"]["model"] == "small-model"
    )


async def test_filters_by_state_role_context_and_text(srv: ServerProcess) -> None:
    mark = uuid.uuid4().hex[:10]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        waiting = await send(c, f"ask:{mark} waiting?")
        done = await send(c, f"say:{mark} done", contextId=f"ctx-{mark}")
        echo = await send(c, f"{mark} Echo", path="/agents/second")
        by_state = await listing(c, q=mark, state="TASK_STATE_INPUT_REQUIRED")
        by_v03_state = await listing(c, q=mark, state="input-required")
        by_role = await listing(c, q=mark, role="second")
        by_context = await listing(c, contextId=f"ctx-{mark}")
        by_id = await listing(c, q=done["id"][:13].upper())
        blind = await listing(c, q=f"{mark} ECHO")
        percent = await listing(c, q="%")
    assert [t["id"] for t in by_state["tasks"]] == [waiting["id"]] == [t["id"] for t in by_v03_state["tasks"]]
    assert [t["id"] for t in by_role["tasks"]] == [echo["id"]]
    assert [t["id"] for t in by_context["tasks"]] == [done["id"]]
    assert [t["id"] for t in by_id["tasks"]] == [done["id"]]
    assert [t["id"] for t in blind["tasks"]] == [echo["id"]], "case-blind"
    assert percent["tasks"] == [], "% is a character, not a wildcard"


async def test_scoped_to_the_caller_and_admins_see_all(srv: ServerProcess) -> None:
    mark = uuid.uuid4().hex[:10]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        hers = await send(c, f"scope-{mark}", who="alice")
        his = await send(c, f"scope-{mark}", who="bob")  # matches the same filter: owner=alice must drop it
        bob_sees = await listing(c, who="bob", q=f"scope-{mark}")
        bob_asks = await c.get("/console/api/tasks", params={"owner": "alice"}, headers=key_of("bob"))
        bob_all = await c.get("/console/api/tasks", params={"owner": "*"}, headers=key_of("bob"))
        bob_task = await c.get(f"/console/api/tasks/{hers['id']}", headers=key_of("bob"))
        carol_all = await listing(c, who="carol", owner="*", q=f"scope-{mark}")
        carol_alice = await listing(c, who="carol", owner="alice", q=f"scope-{mark}")
        carol_own = await listing(c, who="carol", q=f"scope-{mark}")
        carol_task = await c.get(f"/console/api/tasks/{hers['id']}", headers=key_of("carol"))
        alice_task = await c.get(f"/console/api/tasks/{hers['id']}", headers=key_of("alice"))
    assert [t["id"] for t in bob_sees["tasks"]] == [his["id"]], "bob lists his own task only"
    assert bob_asks.status_code == 404 and bob_all.status_code == 404 and bob_task.status_code == 404
    assert hers["id"] not in bob_task.text or "not found" in bob_task.text
    assert sorted(t["owner"] for t in carol_all["tasks"]) == ["alice", "bob"]
    assert [(t["id"], t["owner"]) for t in carol_alice["tasks"]] == [(hers["id"], "alice")]
    assert carol_own["tasks"] == []
    assert carol_task.json()["own"] is False and carol_task.json()["owner"] == "alice"
    got = alice_task.json()
    assert (
        got["own"] is True and got["role"] == "default" and got["endpoint"] == "/agents/default/a2a/jsonrpc"
    )
    assert got["task"]["id"] == hers["id"] and got["lastSeq"] >= 3
    assert got["task"]["history"][0]["parts"] == [{"text": f"scope-{mark}"}]


@pytest.mark.parametrize(
    "query",
    [
        {"state": "TASK_STATE_NOPE"},
        {"changedAfter": "yesterday"},
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "x"},
        {"cursor": "not-a-cursor"},
        {"cursor": "bm90fGF0aW1l"},
    ],
)
async def test_bad_queries_are_400(srv: ServerProcess, query: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        resp = await c.get("/console/api/tasks", params=query, headers=key_of("alice"))
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and "Traceback" not in resp.text


async def test_an_unknown_task_is_404(srv: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        resp = await c.get("/console/api/tasks/no-such-task", headers=key_of("alice"))
    assert resp.status_code == 404 and resp.json()["error"]["status"] == "NOT_FOUND"
