"""Agents that hand work to agents, on a real server of four roles (both databases): a Python agent on `lead`
(`tests.support.agents.caller`) calls `send_to_agent` through its `TaskContext`; the `reviewer` is the
scripted agent; `middle` and `helper` are callers too, for the tree's rules.

A child is an ordinary task of its role, owned by the caller's principal, in a context of its own: ListTasks
and tasks/get on its role show its parent, depth and path; its first message refers to the parent. A child
that asks reaches its parent's call, which answers it. Depth and loops are refused; a run reaches only its
own children; cancelling a parent cancels its children (recursively), and a parent that ends cancels the
ones still running; a child's usage counts once in the principal's sums and once in the parent's
`usage.children`. A client may not set the tree's metadata on any binding.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.api.edge.auth import hash_key
from tests.conftest import BACKENDS, make_server
from tests.support.rpc import text_message
from tests.support.server import ServerProcess

CALLER = "tests.support.agents.caller:CallerAgent"
AGENTS = {
    "lead": {"adapter": CALLER, "card": {"name": "Lead", "description": "Leads the work."}},
    "middle": {"adapter": CALLER},
    "helper": {"adapter": CALLER},
    "reviewer": {"adapter": "scripted", "card": {"name": "Reviewer", "description": "Reviews a diff."}},
}
DEPTH = 2
WAIT_S = 10
"""AGENT_CALL_WAIT_S here: a child still working after it comes back `working`."""
NAMES = {who: f"{who}-{uuid.uuid4().hex[:6]}" for who in ("alice", "payer")}
KEYS = {who: f"{who}-key-{uuid.uuid4().hex}" for who in NAMES}
V10 = {"A2A-Version": "1.0"}
POLL_S = 0.1
DEADLINE_S = 60


@pytest.fixture(scope="module", params=BACKENDS)
async def server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"calls-{request.param}"),
        AUTH_MODE="required",
        API_KEYS=json.dumps({hash_key(KEYS[who]): NAMES[who] for who in NAMES}),
        AGENTS=json.dumps(AGENTS),
        AGENT_CALL_DEPTH=str(DEPTH),
        AGENT_CALL_WAIT_S=str(WAIT_S),
    )
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as c:
        yield c


def role_path(role: str) -> str:
    return "" if role == "lead" else f"/agents/{role}"


async def rpc(
    c: httpx.AsyncClient, method: str, params: Any, role: str = "lead", who: str = "alice", v10: bool = False
) -> dict[str, Any]:
    """One JSON-RPC call on `role`'s endpoint; the whole response object."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"X-API-Key": KEYS[who], **(V10 if v10 else {})}
    resp = await c.post(f"{role_path(role)}/a2a/jsonrpc", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def ok(c: httpx.AsyncClient, method: str, params: Any, **kw: Any) -> dict[str, Any]:
    data = await rpc(c, method, params, **kw)
    assert "result" in data, data
    return data["result"]


async def lead(c: httpx.AsyncClient, plan: list[Any], who: str = "alice", blocking: bool = True) -> dict:
    """The lead's task for `plan` (v0.3), once it ended (or at once, not `blocking`)."""
    params = {"message": text_message(json.dumps(plan)), "configuration": {"blocking": blocking}}
    return await ok(c, "message/send", params, who=who)


def outcomes(task: dict[str, Any]) -> list[Any]:
    """What a caller's plan came to: its final message's JSON."""
    assert task["status"]["state"] == "completed", task
    return json.loads(task["status"]["message"]["parts"][0]["text"])


async def get(c: httpx.AsyncClient, task_id: str, role: str, who: str = "alice") -> dict[str, Any]:
    return await ok(c, "tasks/get", {"id": task_id}, role=role, who=who)


async def until(c: httpx.AsyncClient, task_id: str, role: str, *states: str) -> dict[str, Any]:
    """The task once it is in one of `states`."""
    async with asyncio.timeout(DEADLINE_S):
        while (task := await get(c, task_id, role))["status"]["state"] not in states:
            await asyncio.sleep(POLL_S)
    return task


async def children(c: httpx.AsyncClient, parent: str, role: str, who: str = "alice") -> list[dict[str, Any]]:
    """The tasks of `role` whose parent is `parent`, as ListTasks (v1.0) shows them."""
    page = await ok(c, "ListTasks", {"pageSize": 100}, role=role, who=who, v10=True)
    return [t for t in page["tasks"] if (t.get("metadata") or {}).get("parentTaskId") == parent]


async def child_of(c: httpx.AsyncClient, parent: str, role: str) -> dict[str, Any]:
    """The one child of `parent` on `role`, once its run started it."""
    async with asyncio.timeout(DEADLINE_S):
        while not (found := await children(c, parent, role)):
            await asyncio.sleep(POLL_S)
    assert len(found) == 1, found
    return found[0]


async def test_the_lead_completes_with_the_reviewers_answer_and_the_child_shows_its_parent(
    client: httpx.AsyncClient,
):
    task = await lead(client, [{"send": "reviewer", "text": "say:LGTM, ship it"}])
    [answer] = outcomes(task)
    assert (answer["role"], answer["state"], answer["text"]) == ("reviewer", "completed", "LGTM, ship it")
    assert "parentTaskId" not in (task.get("metadata") or {})

    child = await child_of(client, task["id"], "reviewer")
    assert child["id"] == answer["taskId"]
    assert child["status"]["state"] == "TASK_STATE_COMPLETED"
    assert child["contextId"] != task["contextId"]
    tree = {k: child["metadata"][k] for k in ("parentTaskId", "callDepth", "callPath")}
    assert tree == {"parentTaskId": task["id"], "callDepth": 1, "callPath": ["lead", "reviewer"]}

    got = await get(client, child["id"], "reviewer")
    assert got["metadata"]["parentTaskId"] == task["id"]
    assert got["history"][0]["referenceTaskIds"] == [task["id"]]
    assert got["history"][0]["parts"][0]["text"] == "say:LGTM, ship it"
    # Another principal does not see it, and the lead's role does not list it.
    assert (await rpc(client, "tasks/get", {"id": child["id"]}, role="reviewer", who="payer"))["error"]
    assert await children(client, task["id"], "lead") == []


async def test_a_child_that_asks_reaches_its_parent_which_answers(client: httpx.AsyncClient):
    plan = [{"send": "reviewer", "text": "ask:Which file should I review?"}, {"answer": "main.py"}]
    task = await lead(client, plan)
    asked, answered = outcomes(task)
    assert (asked["state"], asked["text"]) == ("input-required", "Which file should I review?")
    assert answered["taskId"] == asked["taskId"]
    assert answered["state"] == "completed"
    assert "answer:main.py" in answered["text"]
    child = await get(client, asked["taskId"], "reviewer")
    assert child["status"]["state"] == "completed"
    assert [m["parts"][0]["text"] for m in child["history"] if m["role"] == "user"] == [
        "ask:Which file should I review?",
        "main.py",
    ]


async def test_list_agents_and_an_unknown_role(client: httpx.AsyncClient):
    listed, unknown = outcomes(await lead(client, [{"list": True}, {"send": "nobody", "text": "hi"}]))
    assert [(a["role"], a["available"]) for a in listed] == [
        ("lead", True),
        ("middle", True),
        ("helper", True),
        ("reviewer", True),
    ]
    assert {a["role"]: a["name"] for a in listed}["reviewer"] == "Reviewer"
    assert "no role 'nobody'" in unknown["error"]
    assert "lead, middle, helper, reviewer" in unknown["error"]


async def test_a_call_deeper_than_agent_call_depth_is_refused(client: httpx.AsyncClient):
    """lead (0) -> middle (1) -> helper (2) -> reviewer would be 3 deep; AGENT_CALL_DEPTH is 2."""
    helper_plan = [{"send": "reviewer", "text": "say:too deep"}]
    middle_plan = [{"send": "helper", "text": helper_plan}]
    [middle] = outcomes(await lead(client, [{"send": "middle", "text": middle_plan}]))
    assert middle["state"] == "completed"
    [helper] = json.loads(middle["text"])
    assert helper["state"] == "completed"
    [refused] = json.loads(helper["text"])
    assert "3 calls deep" in refused["error"] and "AGENT_CALL_DEPTH allows 2" in refused["error"]
    helper_task = await get(client, helper["taskId"], "helper")
    assert helper_task["metadata"]["callDepth"] == 2
    assert helper_task["metadata"]["callPath"] == ["lead", "middle", "helper"]
    assert await children(client, helper["taskId"], "reviewer") == []


async def test_a_call_back_to_a_role_on_the_path_is_refused(client: httpx.AsyncClient):
    [middle] = outcomes(await lead(client, [{"send": "middle", "text": [{"send": "lead", "text": "[]"}]}]))
    [refused] = json.loads(middle["text"])
    assert "'lead' is already on this task's path (lead -> middle)" in refused["error"]
    assert "loop" in refused["error"]
    assert await children(client, middle["taskId"], "lead") == []


async def test_a_run_reaches_only_the_tasks_it_started(client: httpx.AsyncClient):
    """A task of the same principal the run did not start, and an id that names nothing: the same refusal,
    and the other task is left as it was."""
    ended = (await ok(client, "message/send", {"message": text_message("say:mine")}, role="reviewer"))["id"]
    params = {"message": text_message("sleep:60"), "configuration": {"blocking": False}}
    sleeping = (await ok(client, "message/send", params, role="reviewer"))["id"]
    plan = [{"get": ended}, {"get": "no-such-task"}, {"cancel": sleeping}, {"answer": "x"}]
    got, missing, cancel, answer = outcomes(await lead(client, plan))
    refusal = "is not a task this run started: a run reads, answers and cancels only the tasks it started"
    assert got["error"] == f"Task '{ended}' {refusal}"
    assert missing["error"] == f"Task 'no-such-task' {refusal}"
    assert cancel["error"] == f"Task '{sleeping}' {refusal}"
    assert "not a task this run started" in answer["error"]
    assert (await get(client, sleeping, "reviewer"))["status"]["state"] in ("submitted", "working")
    await ok(client, "tasks/cancel", {"id": sleeping}, role="reviewer")


async def test_cancelling_the_parent_cancels_its_children_down_the_tree(client: httpx.AsyncClient):
    """Each waits in a sleep of its own (no call's wait runs out meanwhile) until the lead is canceled."""
    middle_plan = [{"send": "reviewer", "text": "sleep:120", "wait": False}, {"sleep": 120}]
    plan = [{"send": "middle", "text": middle_plan, "wait": False}, {"sleep": 120}]
    task = await lead(client, plan, blocking=False)
    middle = await child_of(client, task["id"], "middle")
    reviewer = await child_of(client, middle["id"], "reviewer")
    await until(client, reviewer["id"], "reviewer", "working")

    canceled = await ok(client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    middle_end = await until(client, middle["id"], "middle", "canceled", "completed", "failed")
    reviewer_end = await until(client, reviewer["id"], "reviewer", "canceled", "completed", "failed")
    assert middle_end["status"]["state"] == reviewer_end["status"]["state"] == "canceled"
    assert task["id"] in middle_end["status"]["message"]["parts"][0]["text"]
    assert middle["id"] in reviewer_end["status"]["message"]["parts"][0]["text"]


async def test_a_parent_that_ends_cancels_the_children_still_running(client: httpx.AsyncClient):
    task = await lead(client, [{"send": "reviewer", "text": "sleep:120", "wait": False}])
    [started] = outcomes(task)
    assert started["state"] in ("submitted", "working")
    ended = await until(client, started["taskId"], "reviewer", "canceled", "completed", "failed")
    assert ended["status"]["state"] == "canceled"


async def test_a_child_meets_its_roles_media_types_as_a_clients_message_does(client: httpx.AsyncClient):
    """The reviewer takes text/plain only: a child with a PNG is refused before anything is stored (as a
    client's send is, -32005), the refusal naming the type; a text file goes through."""
    png = {"name": "shot.png", "mediaType": "image/png", "text": "not really a png"}
    notes = {"name": "notes.txt", "mediaType": "text/plain", "text": "LGTM"}
    task = await lead(
        client,
        [
            {"send": "reviewer", "text": "say:seen", "files": [png]},
            {"send": "reviewer", "text": "say:ok", "files": [notes]},
        ],
    )
    refused, taken = outcomes(task)
    said = "Role 'reviewer' did not take the task: This agent does not accept image/png; it takes text/plain"
    assert refused == {"error": said}, refused
    assert (taken["state"], taken["text"]) == ("completed", "ok"), taken
    assert [c["id"] for c in await children(client, task["id"], "reviewer")] == [taken["taskId"]]


async def test_a_child_past_agent_call_wait_s_comes_back_working(client: httpx.AsyncClient):
    waited, canceled = outcomes(
        await lead(client, [{"send": "reviewer", "text": "sleep:120"}, {"cancel": None}])
    )
    assert (waited["state"], waited["text"]) == ("working", "")
    assert (canceled["taskId"], canceled["state"]) == (waited["taskId"], "canceled")


async def test_a_childs_usage_counts_once(client: httpx.AsyncClient):
    """The principal's sums hold the lead's report and the reviewer's, each once; the lead's metadata holds
    its own report, and the reviewer's summary in `usage.children` (a second look at the ended child adds
    nothing)."""
    plan = [
        {"usage": ["m-paid", 3, 1, 0.01]},
        {"send": "reviewer", "text": "usage:m-paid:10:5:0.02;say:ok"},
        {"get": None},
    ]
    task = await lead(client, plan, who="payer")
    _, sent, again = outcomes(task)
    assert sent["state"] == again["state"] == "completed"
    child = await get(client, sent["taskId"], "reviewer", who="payer")
    usage = task["metadata"]["usage"]
    assert (usage["reports"], usage["inputTokens"], usage["costUsd"]) == (1, 3, 0.01)
    assert usage["children"] == child["metadata"]["usage"]
    assert usage["childTasks"] == [sent["taskId"]]
    assert child["metadata"]["usage"]["inputTokens"] == 10

    resp = await client.get("/usage", params={"by": "role"}, headers={"X-API-Key": KEYS["payer"]})
    assert resp.status_code == 200, resp.text
    sums = resp.json()
    assert (sums["total"]["inputTokens"], sums["total"]["outputTokens"]) == (13, 6)
    assert sums["total"]["reports"] == 2
    assert sums["total"]["costUsd"] == pytest.approx(0.03)
    assert {g["role"]: g["inputTokens"] for g in sums["groups"]} == {"lead": 3, "reviewer": 10}


@pytest.mark.parametrize("key", ["parentTaskId", "callDepth", "callPath"])
async def test_a_client_may_not_set_the_trees_metadata(client: httpx.AsyncClient, key: str):
    """JSON-RPC (v0.3, v1.0) and REST (v0.3, v1.0): -32602 naming the key, and nothing stored."""
    context = f"ctx-{uuid.uuid4().hex}"
    value: Any = {"parentTaskId": "t-1", "callDepth": 1, "callPath": ["lead"]}[key]
    headers = {"X-API-Key": KEYS["alice"]}
    v03 = text_message("say:x", contextId=context, metadata={key: value})
    v10 = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "say:x"}],
        "contextId": context,
        "metadata": {key: value},
    }
    error = (await rpc(client, "message/send", {"message": v03}, role="reviewer"))["error"]
    assert error["code"] == -32602 and f"metadata.{key}" in error["message"]
    error = (await rpc(client, "SendMessage", {"message": v10}, role="reviewer", v10=True))["error"]
    assert error["code"] == -32602 and f"metadata.{key}" in error["message"]

    proto_v03 = {k: v for k, v in v10.items() if k != "parts"} | {"content": [{"text": "say:x"}]}
    rest_v03 = await client.post(
        "/agents/reviewer/a2a/rest/v1/message:send", json={"message": proto_v03}, headers=headers
    )
    assert rest_v03.status_code == 422 and f"metadata.{key}" in rest_v03.text
    rest_v10 = await client.post(
        "/agents/reviewer/a2a/rest/message:send", json={"message": v10}, headers=headers
    )
    assert rest_v10.status_code == 400 and f"metadata.{key}" in rest_v10.text

    listed = await ok(client, "ListTasks", {"contextId": context}, role="reviewer", v10=True)
    assert listed["tasks"] == []


async def test_an_agent_starts_tasks_no_faster_than_its_principal_may(tmp_path: Any):
    """A child's message meets the checks a client's new task meets on that role: an agent in a loop is held
    to its principal's task rate (TASK_RATE_BURST), the refusal a CallError."""
    srv = await make_server(
        "sqlite",
        tmp_path,
        AUTH_MODE="required",
        API_KEYS=json.dumps({hash_key(KEYS["alice"]): NAMES["alice"]}),
        AGENTS=json.dumps(AGENTS),
        TASK_RATE_PER_MIN="1",
        TASK_RATE_BURST="2",
    )
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as c:
            sends = [{"send": "reviewer", "text": "say:ok"} for _ in range(3)]
            task = await lead(c, sends)
            first, second, third = outcomes(task)
            assert first["state"] == second["state"] == "completed"
            assert "Too many new tasks" in third["error"], third
            assert len(await children(c, task["id"], "reviewer")) == 2
    finally:
        srv.stop()
