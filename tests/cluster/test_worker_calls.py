"""Agents calling agents across a remote worker: a real server process (SQLite) runs the roles `lead`
(the caller test agent, `tests.support.agents.caller`) and `reviewer` (scripted); the role `triager` (a
caller too) runs only in a real `a2a-server worker` process, whose run's calls the server makes for it over
`POST /workers/v1/tasks/{id}/calls`.

The lead hands work to the worker's role and completes with its answer; a run on the worker hands work to
the replica's role (a child that asks is answered from the worker; usage rolls up into the worker's task);
a worker's task that ends cancels the children it left running, and so does one the reaper fails when its
worker is killed; and the worker's credential reaches the
calls of the task it runs only while it runs it: not for another task, not from another instance, not after
the run ended.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.api.edge.auth import hash_key
from tests.conftest import make_server
from tests.support.rpc import text_message
from tests.support.secrets import remember
from tests.support.server import ServerProcess
from tests.support.worker import WorkerProcess, until_listed

CALLER = "tests.support.agents.caller:CallerAgent"
AGENTS = {
    "lead": {"adapter": CALLER, "card": {"name": "Lead"}},
    "reviewer": {"adapter": "scripted", "card": {"name": "Reviewer"}},
    "triager": {"adapter": CALLER, "card": {"name": "Triager"}},
}
WORKER_KEY = "calls-" + os.urandom(8).hex()
remember(WORKER_KEY)
INSTANCE = "w1"
DEADLINE_S = 90
HOLD_S = 2
"""The server's WORKER_CALL_HOLD_S here: a child that sleeps longer makes the worker ask again."""
POLL_S = 0.1


@pytest.fixture(scope="module")
async def team(tmp_path_factory: Any) -> AsyncIterator[tuple[ServerProcess, WorkerProcess]]:
    tmp = tmp_path_factory.mktemp("worker-calls")
    server = await make_server(
        "sqlite",
        tmp / "server",
        AGENTS=json.dumps(AGENTS),
        AGENT_ROLES="lead,reviewer",
        WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "box"}),
        DISCOVERY_HEARTBEAT_S="1",
        DISCOVERY_MAX_AGE_S="10",
        WORKER_CALL_HOLD_S=str(HOLD_S),
        # A killed worker's lease is void within seconds (the last test); a live one renews every TTL/3.
        LEASE_TTL_S="5",
    )
    worker = WorkerProcess(
        server.base_url,
        tmp / "worker.log",
        INSTANCE,
        key=WORKER_KEY,
        agents={"triager": AGENTS["triager"]},
        role="triager",
    )
    worker.start()
    try:
        try:
            await until_listed(server.base_url, "triager", True)
        except TimeoutError:
            pytest.fail(f"the worker was never listed in GET /agents; its log ends:\n{worker.log()[-4000:]}")
        yield server, worker
    finally:
        worker.stop()
        server.stop()


@pytest.fixture
async def client(team: tuple[ServerProcess, WorkerProcess]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=team[0].base_url, timeout=60) as c:
        yield c


def role_path(role: str) -> str:
    return "" if role == "lead" else f"/agents/{role}"


async def ok(c: httpx.AsyncClient, method: str, params: Any, role: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = await c.post(f"{role_path(role)}/a2a/jsonrpc", json=body)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert "result" in data, data
    return data["result"]


async def start(c: httpx.AsyncClient, role: str, plan: list[Any]) -> dict[str, Any]:
    """A caller's task for `plan` on `role`, at once (not blocking: the worker's run may take a while)."""
    params = {"message": text_message(json.dumps(plan)), "configuration": {"blocking": False}}
    return await ok(c, "message/send", params, role)


async def until(c: httpx.AsyncClient, task_id: str, role: str, *states: str) -> dict[str, Any]:
    async with asyncio.timeout(DEADLINE_S):
        while (task := await ok(c, "tasks/get", {"id": task_id}, role))["status"]["state"] not in states:
            await asyncio.sleep(POLL_S)
    return task


async def finished(c: httpx.AsyncClient, role: str, plan: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """The caller's task once it ended, and what its plan came to (its final message's JSON)."""
    task = await start(c, role, plan)
    task = await until(c, task["id"], role, "completed", "failed", "canceled")
    assert task["status"]["state"] == "completed", task["status"]
    return task, json.loads(task["status"]["message"]["parts"][0]["text"])


async def children(c: httpx.AsyncClient, parent: str, role: str) -> list[dict[str, Any]]:
    """The tasks of `role` whose parent is `parent`, as ListTasks (v1.0) shows them."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100}}
    resp = await c.post(f"{role_path(role)}/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
    assert resp.status_code == 200 and "result" in resp.json(), resp.text
    return [
        t for t in resp.json()["result"]["tasks"] if (t.get("metadata") or {}).get("parentTaskId") == parent
    ]


async def call(
    c: httpx.AsyncClient, task_id: str, op: str, args: dict[str, Any] | None = None, instance: str = INSTANCE
) -> httpx.Response:
    """The worker endpoint as the worker's credential reaches it, for `task_id`."""
    body = {"role": "triager", "instance": instance, "op": op, "args": args or {}}
    return await c.post(f"/workers/v1/tasks/{task_id}/calls", json=body, headers={"X-API-Key": WORKER_KEY})


async def test_the_lead_hands_work_to_the_workers_role_and_completes_with_its_answer(
    client: httpx.AsyncClient,
):
    triager_plan = [{"usage": ["m-w", 7, 2, 0.5]}, {"list": True}]
    task, [answer] = await finished(client, "lead", [{"send": "triager", "text": triager_plan}])
    assert (answer["role"], answer["state"]) == ("triager", "completed")
    reported, listed = json.loads(answer["text"])
    assert reported == "reported"
    # The worker's run listed the roles through the server: its own role is available (the worker).
    assert [(a["role"], a["available"]) for a in listed] == [
        ("lead", True),
        ("reviewer", True),
        ("triager", True),
    ]
    child = await ok(client, "tasks/get", {"id": answer["taskId"]}, "triager")
    tree = {k: child["metadata"][k] for k in ("parentTaskId", "callDepth", "callPath")}
    assert tree == {"parentTaskId": task["id"], "callDepth": 1, "callPath": ["lead", "triager"]}
    assert child["history"][0]["referenceTaskIds"] == [task["id"]]
    assert task["metadata"]["usage"]["children"] == child["metadata"]["usage"]
    assert child["metadata"]["usage"]["inputTokens"] == 7


async def test_a_run_on_the_worker_hands_work_to_a_replicas_role(client: httpx.AsyncClient):
    """Its calls go through the worker endpoint: a send that waits, a child that asks and the worker's
    answer, a read; the children's usage rolls up into the worker's task once."""
    plan = [
        {"send": "reviewer", "text": "usage:m-r:10:5:0.02;say:LGTM"},
        {"get": None},
        {"send": "reviewer", "text": "ask:Which file?"},
        {"answer": "main.py"},
        {"send": "nobody", "text": "hi"},
    ]
    task, (said, again, asked, answered, unknown) = await finished(client, "triager", plan)
    assert (said["role"], said["state"], said["text"]) == ("reviewer", "completed", "LGTM")
    assert (again["taskId"], again["state"]) == (said["taskId"], "completed")
    assert (asked["state"], asked["text"]) == ("input-required", "Which file?")
    assert (answered["taskId"], answered["state"]) == (asked["taskId"], "completed")
    assert "answer:main.py" in answered["text"]
    assert "no role 'nobody'" in unknown["error"]

    first = await ok(client, "tasks/get", {"id": said["taskId"]}, "reviewer")
    assert first["metadata"]["parentTaskId"] == task["id"]
    assert first["metadata"]["callPath"] == ["triager", "reviewer"]
    # Seen ended twice, counted once (the child that asked reported no usage).
    usage = task["metadata"]["usage"]
    assert usage["children"] == first["metadata"]["usage"]
    assert usage["children"]["inputTokens"] == 10
    assert usage["childTasks"] == [said["taskId"]]


async def test_a_worker_runs_send_waits_past_the_servers_hold_of_one_call(client: httpx.AsyncClient):
    """The server holds one call at most WORKER_CALL_HOLD_S; the worker asks again until the child ends."""
    _, [late] = await finished(
        client, "triager", [{"send": "reviewer", "text": f"sleep:{3 * HOLD_S};say:late"}]
    )
    assert (late["state"], late["text"]) == ("completed", "late")


async def test_cancelling_a_worker_task_cancels_its_children(client: httpx.AsyncClient):
    plan = [{"send": "reviewer", "text": "sleep:120", "wait": False}, {"sleep": 120}]
    task = await start(client, "triager", plan)
    async with asyncio.timeout(DEADLINE_S):
        while not (found := await children(client, task["id"], "reviewer")):
            await asyncio.sleep(POLL_S)
    [child] = found
    await until(client, child["id"], "reviewer", "working")
    await ok(client, "tasks/cancel", {"id": task["id"]}, "triager")
    ended = await until(client, child["id"], "reviewer", "canceled", "completed", "failed")
    assert ended["status"]["state"] == "canceled"
    assert task["id"] in ended["status"]["message"]["parts"][0]["text"]


async def test_a_worker_task_that_ends_cancels_the_children_it_left_running(client: httpx.AsyncClient):
    task, [started] = await finished(
        client, "triager", [{"send": "reviewer", "text": "sleep:120", "wait": False}]
    )
    assert started["state"] in ("submitted", "working")
    child = await until(client, started["taskId"], "reviewer", "canceled", "completed", "failed")
    assert child["status"]["state"] == "canceled"
    assert task["id"] in child["status"]["message"]["parts"][0]["text"]


async def test_the_workers_credential_reaches_only_the_task_it_runs_while_it_runs(
    client: httpx.AsyncClient,
):
    """While the worker runs a task, its credential makes that task's calls, from its own instance only; any
    other task, and the same task once its run ended, is 409 `not_held`; bad requests are 400."""
    # Its usage report is its run's first event: `working` says the worker runs it.
    running = await start(client, "triager", [{"usage": ["m-w", 1, 1, 0]}, {"sleep": 120}])
    await until(client, running["id"], "triager", "working")
    other, _ = await finished(client, "lead", [])

    mine = await call(client, running["id"], "list_agents")
    assert mine.status_code == 200, mine.text
    assert {a["role"] for a in mine.json()["agents"]} == {"lead", "reviewer", "triager"}
    refused = await call(client, running["id"], "send_to_agent", {"role": "nobody", "text": "hi"})
    assert refused.status_code == 422 and "no role 'nobody'" in refused.json()["error"]["message"]
    not_child = await call(client, running["id"], "get_task", {"taskId": other["id"]})
    assert not_child.status_code == 422 and "not a task this run started" in not_child.text

    for task_id, instance in ((other["id"], INSTANCE), ("no-such-task", INSTANCE), (running["id"], "w2")):
        resp = await call(client, task_id, "list_agents", instance=instance)
        assert resp.status_code == 409, resp.text
        assert resp.json()["error"]["code"] == "not_held"
        assert "not running at this worker" in resp.json()["error"]["message"]

    bad_op = await call(client, running["id"], "delete_everything")
    assert bad_op.status_code == 400 and bad_op.json()["error"]["code"] == "invalid"
    bad_args = await call(client, running["id"], "get_task", {"taskId": 3})
    assert bad_args.status_code == 400 and "taskId" in bad_args.json()["error"]["message"]
    no_key = await client.post(f"/workers/v1/tasks/{running['id']}/calls", json={})
    assert no_key.status_code == 401

    await ok(client, "tasks/cancel", {"id": running["id"]}, "triager")
    await until(client, running["id"], "triager", "canceled")
    after = await call(client, running["id"], "list_agents")
    assert after.status_code == 409 and after.json()["error"]["code"] == "not_held"

    ended, _ = await finished(client, "triager", [])
    resp = await call(client, ended["id"], "list_agents")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_held"


async def test_a_task_failed_by_the_reaper_when_its_worker_died_cancels_the_children_it_left_running(
    team: tuple[ServerProcess, WorkerProcess], client: httpx.AsyncClient
):
    """The worker is killed (`kill -9`) while its task waits with a child running: the reaper fails the
    task (no checkpoint to go on from), and the child, whose answer nobody will read, is canceled naming
    its parent. The worker is started again for whatever runs after."""
    server, worker = team
    plan = [{"send": "reviewer", "text": "sleep:120", "wait": False}, {"sleep": 120}]
    task = await start(client, "triager", plan)
    async with asyncio.timeout(DEADLINE_S):
        while not (found := await children(client, task["id"], "reviewer")):
            await asyncio.sleep(POLL_S)
    [child] = found
    await until(client, child["id"], "reviewer", "working")
    lives = worker.started()
    worker.kill()
    try:
        lost = await until(client, task["id"], "triager", "failed", "canceled", "completed")
        assert lost["status"]["state"] == "failed", lost["status"]
        ended = await until(client, child["id"], "reviewer", "canceled", "completed", "failed")
        assert ended["status"]["state"] == "canceled", (ended["status"], server.log_tail())
        said = ended["status"]["message"]["parts"][0]["text"]
        assert said == f"Its parent task {task['id']} ended failed: its run was lost", said
    finally:
        worker.start()
        async with asyncio.timeout(DEADLINE_S):
            while worker.started() == lives:
                await asyncio.sleep(POLL_S)
