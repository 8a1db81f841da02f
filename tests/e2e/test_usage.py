"""Usage and cost on a real server (both databases): what the scripted agent reports (`usage:` steps, the
price table pricing the ones without a cost) is summed in the task's metadata on every binding and version,
carried by its status event on a stream, summed by `GET /usage` per context, role, model and day for its
owner only (CONSOLE_ADMINS may see others'), and counted in /metrics."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.api.edge.auth import hash_key
from tests.conftest import BACKENDS, make_server
from tests.e2e.test_metrics import delta, scrape
from tests.support.rpc import text_message
from tests.support.server import ServerProcess

# Principals of this module alone, so the sums it checks are its own.
NAMES = {who: f"{who}-{uuid.uuid4().hex[:6]}" for who in ("alice", "bob", "admin")}
KEYS = {who: f"{who}-key-{uuid.uuid4().hex}" for who in NAMES}
PRICES = {"e2e-model": {"input": 2.0, "output": 10.0}}
"""USD per million tokens of the model the reports leave without a cost (PRICE_TABLE_FILE)."""
AGENTS = {"default": {"adapter": "scripted"}, "reviewer": {"adapter": "scripted"}}
REVIEWER = "/agents/reviewer"
V10 = {"A2A-Version": "1.0"}


def key(who: str) -> dict[str, str]:
    return {"X-API-Key": KEYS[who]}


@pytest.fixture(scope="module", params=BACKENDS)
async def server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"usage-{request.param}")
    prices = tmp / "prices.json"
    prices.write_text(json.dumps(PRICES))
    srv = await make_server(
        request.param,
        tmp,
        AUTH_MODE="required",
        API_KEYS=json.dumps({hash_key(KEYS[who]): NAMES[who] for who in NAMES}),
        CONSOLE_ADMINS=f"someone-else, {NAMES['admin']}",
        PRICE_TABLE_FILE=str(prices),
        AGENTS=json.dumps(AGENTS),
    )
    yield srv
    srv.stop()


async def rpc(
    c: httpx.AsyncClient, method: str, params: Any, who: str = "alice", path: str = "", **headers: str
):
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = await c.post(f"{path}/a2a/jsonrpc", json=body, headers={**key(who), **headers})
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert "result" in data, data
    return data["result"]


async def send(c: httpx.AsyncClient, text: str, who: str = "alice", path: str = "", **fields: Any) -> dict:
    return await rpc(c, "message/send", {"message": text_message(text, **fields)}, who, path)


def priced(tokens_in: int, tokens_out: int) -> float:
    p = PRICES["e2e-model"]
    return (tokens_in * p["input"] + tokens_out * p["output"]) / 1_000_000


async def test_two_turns_sum_in_the_task_metadata_on_every_binding(client: httpx.AsyncClient):
    """Reported before asking, and after the answer: the task's metadata sums both, in v0.3 and v1.0,
    JSON-RPC and both REST bindings, get and list, with the state transitions beside it."""
    asked = await send(client, "usage:e2e-model:1000:100;tool:Read;ask:go on?;usage:m-paid:5:1:0.02")
    assert asked["status"]["state"] == "input-required"
    first = asked["metadata"]["usage"]
    assert (first["reports"], first["inputTokens"], first["costUsd"]) == (1, 1000, priced(1000, 100))
    assert first["models"]["e2e-model"]["costSource"] == "price-table"
    done = await send(client, "yes", taskId=asked["id"], contextId=asked["contextId"])
    assert done["status"]["state"] == "completed"
    usage = done["metadata"]["usage"]
    assert (usage["reports"], usage["inputTokens"], usage["outputTokens"], usage["toolCalls"]) == (
        2,
        1005,
        101,
        1,
    )
    assert usage["costUsd"] == pytest.approx(priced(1000, 100) + 0.02)
    assert usage["models"]["m-paid"] == {
        "inputTokens": 5,
        "outputTokens": 1,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
        "costUsd": 0.02,
        "costSource": "reported",
    }
    assert [t["state"] for t in done["metadata"]["stateTransitions"]][-1] == "completed"

    tid = done["id"]
    seen = {
        "v0.3 tasks/get": (await rpc(client, "tasks/get", {"id": tid}))["metadata"],
        "v1.0 GetTask": (await rpc(client, "GetTask", {"id": tid}, **V10))["metadata"],
        "v1.0 ListTasks": next(
            t["metadata"]
            for t in (await rpc(client, "ListTasks", {"contextId": done["contextId"]}, **V10))["tasks"]
            if t["id"] == tid
        ),
        "v1.0 REST": (await client.get(f"/a2a/rest/tasks/{tid}", headers=key("alice"))).json()["metadata"],
        "v0.3 REST": (await client.get(f"/a2a/rest/v1/tasks/{tid}", headers=key("alice"))).json()["metadata"],
        "alias": (await client.get(f"/a2a/tasks/{tid}", headers=key("alice"))).json()["metadata"],
    }
    for where, metadata in seen.items():
        assert metadata["usage"] == usage, where
        assert metadata["stateTransitions"], where
    assert seen["v1.0 GetTask"]["stateTransitions"][-1]["state"] == "TASK_STATE_COMPLETED"


async def test_a_stream_carries_each_report_and_each_tool_call(client: httpx.AsyncClient):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": text_message("tool:Grep;usage:e2e-model:10:1;say:done")},
    }
    events = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body, headers=key("alice")) as src:
        async for sse in src.aiter_sse():
            if sse.data:
                events.append(json.loads(sse.data)["result"])
    statuses = [e for e in events if e.get("kind") == "status-update"]
    calls = [e["status"]["message"] for e in statuses if (e["status"].get("message") or {}).get("metadata")]
    assert [m["parts"][0]["text"] for m in calls] == ["Using tool: Grep"]
    assert calls[0]["metadata"] == {"toolCall": {"name": "Grep", "input": {"path": "README.md"}}}
    reports = [e["metadata"]["usage"] for e in statuses if "usage" in (e.get("metadata") or {})]
    assert len(reports) == 1
    assert reports[0]["models"][0]["inputTokens"] == 10 and reports[0]["toolCalls"] == 1
    assert reports[0]["models"][0]["costUsd"] == priced(10, 1)


async def test_usage_sums_per_context_role_model_and_day_for_the_caller_only(client: httpx.AsyncClient):
    who = "bob"  # bob's sums hold only this test's runs
    one = await send(client, "usage:e2e-model:100:10;usage:m-paid:1:1:0.5", who)
    await send(client, "usage:e2e-model:50:5", who, contextId=one["contextId"])
    other = await send(client, "usage:m-paid:7:0:0.25", who, path=REVIEWER)
    assert other["metadata"]["usage"]["inputTokens"] == 7

    async def usage(**params: str) -> dict[str, Any]:
        resp = await client.get("/usage", params=params, headers=key(who))
        assert resp.status_code == 200, resp.text
        assert resp.headers["cache-control"] == "no-store"
        return resp.json()

    by_context = await usage(by="context")
    assert by_context["owner"] == NAMES[who] and by_context["truncated"] is False
    contexts = {g["contextId"]: g for g in by_context["groups"]}
    assert (contexts[one["contextId"]]["inputTokens"], contexts[one["contextId"]]["tasks"]) == (151, 2)
    assert contexts[one["contextId"]]["reports"] == 3
    assert contexts[one["contextId"]]["costUsd"] == pytest.approx(0.5 + priced(150, 15))
    assert contexts[other["contextId"]]["inputTokens"] == 7
    assert by_context["total"]["inputTokens"] == 158 and by_context["total"]["tasks"] == 3

    by_role = {g["role"]: g["inputTokens"] for g in (await usage(by="role"))["groups"]}
    assert by_role == {"default": 151, "reviewer": 7}
    by_model = {g["model"]: g["outputTokens"] for g in (await usage(by="model"))["groups"]}
    assert by_model == {"e2e-model": 15, "m-paid": 1}
    today = datetime.now(UTC).date()
    by_day = await usage(by="day")
    assert [g["inputTokens"] for g in by_day["groups"]] == [158]
    assert by_day["groups"][0]["day"] in {today.isoformat(), (today - timedelta(days=1)).isoformat()}
    assert (await usage(by="day", since=(today + timedelta(days=1)).isoformat()))["groups"] == []
    assert (await usage(by="role", role="reviewer"))["total"]["inputTokens"] == 7
    assert (await usage(by="model", contextId=one["contextId"]))["total"]["inputTokens"] == 151
    assert len((await usage(by="context", limit="1"))["groups"]) == 1


async def test_another_principals_usage_is_seen_by_admins_only(client: httpx.AsyncClient):
    mine = await send(client, "usage:e2e-model:3:3", "alice")
    alice, bob = NAMES["alice"], NAMES["bob"]

    async def ask(who: str, **params: str) -> httpx.Response:
        return await client.get("/usage", params={"by": "context", **params}, headers=key(who))

    bobs = (await ask("bob")).json()
    assert mine["contextId"] not in {g["contextId"] for g in bobs["groups"]}
    for owner in (alice, "*"):
        refused = await ask("bob", owner=owner)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["status"] == "PERMISSION_DENIED"
    assert (await ask("bob", owner=bob)).status_code == 200
    assert (await client.get("/usage")).status_code == 401

    as_admin = (await ask("admin", owner=alice)).json()
    assert as_admin["owner"] == alice
    assert mine["contextId"] in {g["contextId"] for g in as_admin["groups"]}
    assert as_admin["total"] == (await ask("alice")).json()["total"]
    everyone = (await ask("admin", owner="*")).json()
    assert everyone["owner"] == "*"
    owners = {g["owner"] for g in everyone["groups"]}
    assert {alice, bob} <= owners
    assert (await ask("admin")).json()["owner"] == NAMES["admin"], "an admin's own by default"


@pytest.mark.parametrize(
    "params",
    [
        {"by": "week"},
        {"since": "yesterday"},
        {"until": "2026-13-01"},
        {"limit": "0"},
        {"limit": "x"},
        {"since": "2026-02-02", "until": "2026-02-01"},
    ],
)
async def test_bad_parameters_are_400(client: httpx.AsyncClient, params: dict[str, str]):
    resp = await client.get("/usage", params=params, headers=key("alice"))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_metrics_count_tokens_and_cost_by_role_and_model(client: httpx.AsyncClient):
    before = await scrape(client)
    await send(client, "usage:e2e-model:40:4;usage:m-paid:0:2:0.125", "alice", path=REVIEWER)
    after = await scrape(client)
    tokens = "a2a_usage_tokens_total"
    assert delta(before, after, tokens, role="reviewer", model="e2e-model", kind="input") == 40
    assert delta(before, after, tokens, role="reviewer", model="e2e-model", kind="output") == 4
    assert delta(before, after, tokens, role="reviewer", model="m-paid", kind="output") == 2
    assert delta(before, after, tokens, role="reviewer", model="m-paid", kind="cache_read") == 0
    cost = "a2a_usage_cost_usd_total"
    assert delta(before, after, cost, role="reviewer", model="m-paid") == pytest.approx(0.125)
    assert delta(before, after, cost, role="reviewer", model="e2e-model") == pytest.approx(priced(40, 4))
