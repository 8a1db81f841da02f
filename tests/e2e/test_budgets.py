"""Budgets over real server processes (SQLite): the principal's day (BUDGET_DAY_USD) and a task's children.

`day`: the scripted agent with BUDGET_DAY_USD 0.05. Once a task has reported 0.06 USD today, the next send
that would start a task is refused at once on every binding and both versions (JSON-RPC, HTTP+JSON, gRPC; a
stream too; the MCP host endpoint's `run_task`) with the task-rate code (-32092, HTTP 429 with `Retry-After`,
gRPC RESOURCE_EXHAUSTED) and a message saying when the day resets; nothing is stored. An answer to a waiting
task is still taken.

`tree`: the caller agent (tests/support/agents/caller.py) as `lead` with `budget_usd` 0.05 and the scripted
agent as `worker`. A child gets what its parent has left as its own budget, and its spend rolls up into
its parent's: past the parent's cap the parent fails naming its budget, and a child it left running is
canceled. A task's own cap stopping a real CLI: tests/cli/test_budget_cli.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.conftest import make_server
from tests.support.clis import status_text, wait_until_stopped
from tests.support.mcp import mcp_client, refusal
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess, free_port

CALLER = "tests.support.agents.caller:CallerAgent"
BINDINGS = (
    "jsonrpc-0.3",
    "jsonrpc-0.3-stream",
    "jsonrpc-1.0",
    "rest-0.3",
    "rest-1.0",
    "grpc-0.3",
    "grpc-1.0",
    "mcp",
)


LEAD_PLAN = [
    {"send": "default", "text": "ask:Go on?", "wait": True},
    {"poll": "canceled"},
    {"send": "default", "text": "say:another", "wait": True},
]
"""The `lead`'s run: a child that waits, then (once the test has spent the day and canceled it) another."""


@pytest.fixture(scope="module")
async def day(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server whose one principal (anonymous) has spent its day: a task reported 0.06 of 0.05. Before
    that, a task waits for input and a `lead` (the caller agent) started a child; the child is canceled once
    the day is spent, and the lead's run goes on to start another."""
    port = free_port()
    agents = {"default": {"adapter": "scripted"}, "lead": {"adapter": CALLER}}
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("budget-day"),
        AGENTS=json.dumps(agents),
        BUDGET_DAY_USD="0.05",
        GRPC_PORT=str(port),
    )
    srv.grpc_port = port  # type: ignore[attr-defined]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        body = {"message": text_message(json.dumps(LEAD_PLAN))}
        lead = await _rpc(
            http, "/agents/lead/a2a/jsonrpc", "message/send", {**body, "configuration": {"blocking": False}}
        )
        child = await _first_child(http, lead["id"])
        waiting = await result(http, "message/send", {"message": text_message("ask:Go on?")})
        srv.waiting = await wait_until_stopped(http, waiting)  # type: ignore[attr-defined]
        spent = await result(http, "message/send", {"message": text_message("usage:m:10:10:0.06")})
        assert (await wait_until_stopped(http, spent))["status"]["state"] == "completed"
        await result(http, "tasks/cancel", {"id": child["id"]})
        srv.lead = lead  # type: ignore[attr-defined]
    yield srv
    srv.stop()


async def _rpc(http: httpx.AsyncClient, path: str, method: str, params: dict[str, Any]) -> Any:
    resp = await http.post(path, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return resp.json()["result"]


async def _first_child(http: httpx.AsyncClient, parent_id: str) -> dict[str, Any]:
    """The lead's child, once it waits for input."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    async with asyncio.timeout(60):
        while True:
            listed = (await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})).json()
            for t in listed["result"]["tasks"]:
                mine = (t.get("metadata") or {}).get("parentTaskId") == parent_id
                if mine and t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED":
                    return t
            await asyncio.sleep(0.1)


def _reset_in(text: str) -> None:
    """The refusal names the budget, the spend and the next UTC midnight."""
    midnight = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    just_after = (datetime.now(UTC) + timedelta(days=1, minutes=1)).strftime("%Y-%m-%dT00:00:00Z")
    assert "daily budget is spent: $0.06 of $0.05" in text, text
    assert midnight in text or just_after in text, text


async def _refused(srv: ServerProcess, http: httpx.AsyncClient, binding: str, ctx: str) -> str:
    """Send a new message in `ctx` by `binding`; the refusal's text, after checking its code and status."""
    mid = str(uuid.uuid4())
    if binding.startswith("grpc"):
        return await _grpc_refused(srv, binding.endswith("1.0"), ctx, mid)
    if binding == "mcp":
        async with mcp_client(srv.base_url) as client:
            return refusal(await client.call_tool("run_task", {"role": "default", "message": "say:hi"}))
    v03_message = text_message("say:hi", messageId=mid, contextId=ctx)
    if binding.startswith("jsonrpc-0.3"):
        method = "message/stream" if binding.endswith("stream") else "message/send"
        resp = await http.post(
            "/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": v03_message}},
        )
        error = resp.json()["error"]
        assert error["code"] == -32092 and error["data"]["retryAfter"] >= 1, resp.text
        return error["message"]
    v10 = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "say:hi"}], "contextId": ctx}
    if binding == "jsonrpc-1.0":
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": v10}}
        resp = await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
        error = resp.json()["error"]
        assert error["code"] == -32092 and error["data"][0]["reason"] == "RATE_LIMITED", resp.text
        return error["message"]
    if binding == "rest-1.0":
        resp = await http.post(
            "/a2a/rest/message:send", json={"message": v10}, headers={"A2A-Version": "1.0"}
        )
        assert resp.status_code == 429 and int(resp.headers["Retry-After"]) >= 1, resp.text
        assert resp.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        return resp.json()["error"]["message"]
    v03 = {"messageId": mid, "role": "ROLE_USER", "content": [{"text": "say:hi"}], "contextId": ctx}
    resp = await http.post("/a2a/rest/v1/message:send", json={"message": v03})
    assert resp.status_code == 429 and int(resp.headers["Retry-After"]) >= 1, resp.text
    assert resp.json()["code"] == -32092
    return resp.json()["message"]


async def _grpc_refused(srv: ServerProcess, v10: bool, ctx: str, mid: str) -> str:
    if v10:
        message = a2a_pb2.Message(
            message_id=mid, context_id=ctx, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="say:hi")]
        )
        request: Any = a2a_pb2.SendMessageRequest(message=message)
    else:
        message3 = a2a_v0_3_pb2.Message(
            message_id=mid,
            context_id=ctx,
            role=a2a_v0_3_pb2.ROLE_USER,
            content=[a2a_v0_3_pb2.Part(text="say:hi")],
        )
        request = a2a_v0_3_pb2.SendMessageRequest(request=message3)
    stub_of = a2a_pb2_grpc.A2AServiceStub if v10 else a2a_v0_3_pb2_grpc.A2AServiceStub
    async with grpc.aio.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as channel:  # type: ignore[attr-defined]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub_of(channel).SendMessage(request)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    return caught.value.details() or ""


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_spent_day_refuses_the_next_send_on_every_binding_and_stores_nothing(
    day: ServerProcess, binding: str
) -> None:
    ctx = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=day.base_url, timeout=30) as http:
        _reset_in(await _refused(day, http, binding, ctx))
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"contextId": ctx}}
        listed = (await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})).json()
        assert listed["result"]["tasks"] == [], "a refused message starts no task"


async def test_a_spent_day_still_takes_an_answer_to_a_waiting_task(day: ServerProcess) -> None:
    """The day's cap stops new tasks; a question asked before it was spent is answered and its task ends."""
    waiting = day.waiting  # type: ignore[attr-defined]
    assert waiting["status"]["state"] == "input-required"
    answer = text_message("y", taskId=waiting["id"], contextId=waiting["contextId"])
    async with httpx.AsyncClient(base_url=day.base_url, timeout=30) as http:
        _reset_in(await _refused_new(http))
        done = await result(http, "message/send", {"message": answer})
        assert (await wait_until_stopped(http, done))["status"]["state"] == "completed"


async def _refused_new(http: httpx.AsyncClient) -> str:
    """The day's refusal of a new task, here and now (so the answer above is taken on a spent day)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": text_message("hi")}}
    refused = (await http.post("/a2a/jsonrpc", json=body)).json()
    assert refused["error"]["code"] == -32092, refused
    return refused["error"]["message"]


async def test_a_spent_day_refuses_a_running_agents_next_child(day: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=day.base_url, timeout=30) as http:
        lead = day.lead  # type: ignore[attr-defined]
        async with asyncio.timeout(60):
            while (lead := await _rpc(http, "/agents/lead/a2a/jsonrpc", "tasks/get", {"id": lead["id"]}))[
                "status"
            ]["state"] not in ("completed", "failed"):
                await asyncio.sleep(0.1)
    assert lead["status"]["state"] == "completed", status_text(lead)
    first, canceled, refused = json.loads(status_text(lead))
    assert first["state"] == "input-required" and canceled["state"] == "canceled"
    assert "did not take the task: The daily budget is spent: $0.06 of $0.05" in refused["error"], refused


async def test_usage_shows_the_days_spend_against_its_cap(day: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=day.base_url, timeout=30) as http:
        budget = (await http.get("/usage")).json()["budget"]
    assert budget["dayBudgetUsd"] == 0.05 and budget["spentUsd"] == pytest.approx(0.06)
    assert budget["day"] == datetime.now(UTC).date().isoformat() or budget["resetsAt"].endswith("T00:00:00Z")
    assert budget["resetsAt"].endswith("T00:00:00Z")


# ---- children count against their parent ------------------------------------------------------------


@pytest.fixture(scope="module")
async def tree(tmp_path_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    agents = {"lead": {"adapter": CALLER, "budget_usd": 0.05}, "worker": {"adapter": "scripted"}}
    srv = await make_server("sqlite", tmp_path_factory.mktemp("budget-tree"), AGENTS=json.dumps(agents))
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            yield http
    finally:
        srv.stop()


async def _lead(http: httpx.AsyncClient, plan: list[dict[str, Any]]) -> dict[str, Any]:
    sent = await result(http, "message/send", {"message": text_message(json.dumps(plan))})
    return await wait_until_stopped(http, sent)


WORKER = "/agents/worker/a2a/jsonrpc"


async def _get(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
    return (await http.post(WORKER, json=body)).json()["result"]


async def _children(http: httpx.AsyncClient, parent_id: str) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    listed = (await http.post(WORKER, json=body, headers={"A2A-Version": "1.0"})).json()["result"]
    return [t for t in listed["tasks"] if (t.get("metadata") or {}).get("parentTaskId") == parent_id]


async def _ended(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """The child once it has ended (its cancel follows its parent's end)."""
    async with asyncio.timeout(30):
        while (task := await _get(http, task_id))["status"]["state"] not in (
            "canceled",
            "failed",
            "completed",
        ):
            await asyncio.sleep(0.1)
    return task


async def test_a_child_gets_its_parents_budget_and_its_spend_fails_the_parent(
    tree: httpx.AsyncClient,
) -> None:
    spend = "usage:m:1:1:0.02;usage:m:1:1:0.02;usage:m:1:1:0.02;sleep:60"
    parent = await _lead(tree, [{"send": "worker", "text": spend, "wait": True}])
    assert parent["status"]["state"] == "failed", status_text(parent)
    assert "spent $0.06 against its budget of $0.05" in status_text(parent)
    usage = parent["metadata"]["usage"]
    assert usage["costUsd"] is None and usage["children"]["costUsd"] == pytest.approx(0.06)
    (child_id,) = usage["childTasks"]
    child = await _get(tree, child_id)
    assert child["metadata"]["budgetUsd"] == pytest.approx(0.05), "the child got what its parent had left"
    assert child["status"]["state"] == "failed"
    assert "spent $0.06 against its budget of $0.05" in status_text(child)


async def test_a_child_within_its_share_and_its_parent_fail_on_their_sum(tree: httpx.AsyncClient) -> None:
    spend = "usage:m:1:1:0.02;usage:m:1:1:0.02"
    plan = [{"send": "worker", "text": spend, "wait": True}, {"usage": ["m", 1, 1, 0.02]}, {"sleep": 60}]
    parent = await _lead(tree, plan)
    assert parent["status"]["state"] == "failed", status_text(parent)
    assert "spent $0.06 against its budget of $0.05" in status_text(parent)
    usage = parent["metadata"]["usage"]
    assert usage["costUsd"] == pytest.approx(0.02) and usage["children"]["costUsd"] == pytest.approx(0.04)
    (child_id,) = usage["childTasks"]
    assert (await _get(tree, child_id))["status"]["state"] == "completed"


async def test_a_parent_past_its_budget_cancels_the_child_it_left_running(tree: httpx.AsyncClient) -> None:
    plan = [
        {"send": "worker", "text": "say:working;sleep:60", "wait": False},
        {"usage": ["m", 1, 1, 0.06]},
        {"sleep": 60},
    ]
    parent = await _lead(tree, plan)
    assert parent["status"]["state"] == "failed", status_text(parent)
    assert "spent $0.06 against its budget of $0.05" in status_text(parent)
    (child,) = await _children(tree, parent["id"])
    child = await _ended(tree, child["id"])
    assert child["status"]["state"] == "canceled", status_text(child)
