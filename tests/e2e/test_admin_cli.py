"""The admin command line as an operator runs it: `.venv/bin/a2a-server tasks ...` and `prune`, real
subprocesses against the database of a real server process that keeps serving, both databases.

`tasks cancel` of a task whose agent runs on the server stops that agent: on PostgreSQL with Redis through
the bus (the server cancels it), and, like on SQLite without Redis, by taking the lease over (the server
stops its run at its next heartbeat). `tasks tail` prints events as they are committed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.protocol.model import utcnow
from app.store.db import create_engine
from tests.conftest import BACKENDS, make_server
from tests.support.fill import Spec, fill
from tests.support.rpc import result, text_message
from tests.support.server import BIN, ROOT, ServerProcess

RUNS = 'a2a_agent_runs{role="default"}'


@pytest.fixture(scope="module", params=BACKENDS)
async def srv(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    # The default lease TTL (15 s): a freshly started CLI process must find the server's leases unexpired
    # however long it takes to start; the paths without Redis wait for a heartbeat (TTL/3) at most.
    env = {
        # The server's own retention off: its pass (every 10 min, on a slow run within this module's life)
        # would delete the old tasks the prune test writes before the command line does.
        "TASK_RETENTION_DAYS": "0",
        "PUSH_NOTIFICATION_ALLOW_HTTP": "true",
        "PUSH_NOTIFICATION_ALLOWED_HOSTS": "127.0.0.1",
        "PUSH_POLL_S": "0.05",
    }
    redis = os.environ.get("TEST_REDIS_URL")
    if request.param == "postgres" and redis:
        env["REDIS_URL"] = redis
    server = await make_server(request.param, tmp_path_factory.mktemp(f"admin-{request.param}"), **env)
    yield server
    server.stop()


@pytest.fixture
async def client(srv: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as c:
        yield c


async def cli(srv: ServerProcess, *args: str, redis: bool = True) -> tuple[int, str, str]:
    """Run `a2a-server <args>` against the server's database (and its Redis, unless `redis` is False)."""
    env = dict(srv.env)
    if not redis:
        env.pop("REDIS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "a2a-server"),
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def cli_json(srv: ServerProcess, *args: str) -> Any:
    code, out, err = await cli(srv, *args, "--json")
    assert code == 0, err
    return json.loads(out)


async def metric(client: httpx.AsyncClient, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", (await client.get("/metrics")).text, re.M)
    return float(m.group(1)) if m else 0.0


async def until(check, timeout: float = 60) -> Any:
    async with asyncio.timeout(timeout):
        while not (got := await check()):
            await asyncio.sleep(0.1)
    return got


async def start(client: httpx.AsyncClient, text: str, **config: Any) -> dict[str, Any]:
    """A task started without waiting for it."""
    return await result(
        client,
        "message/send",
        {"message": text_message(text), "configuration": {"blocking": False, **config}},
    )


async def state_of(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    return await result(client, "tasks/get", {"id": task_id})


async def test_list_and_show(srv, client, receiver):
    hook = {"url": receiver.url("/admin-show"), "token": "t"}
    done = await result(
        client,
        "message/send",
        {
            "message": text_message("usage:m1:10:5:0.25;say:hello there", contextId="admin-ctx"),
            "configuration": {"pushNotificationConfig": hook},
        },
    )
    waiting = await result(
        client, "message/send", {"message": text_message("ask:Go on?", contextId="admin-ctx")}
    )
    assert done["status"]["state"] == "completed" and waiting["status"]["state"] == "input-required"
    await receiver.wait_for(
        lambda: any(c.body["status"]["state"] == "completed" for c in receiver.at("/admin-show"))
    )

    listed = await cli_json(srv, "tasks", "list", "--context", "admin-ctx")
    assert [t["id"] for t in listed] == [waiting["id"], done["id"]]  # newest status first
    assert listed[0] | {"statusAt": None, "createdAt": None} == {
        "id": waiting["id"],
        "state": "input-required",
        "role": "default",
        "owner": "anonymous",
        "contextId": "admin-ctx",
        "statusAt": None,
        "createdAt": None,
        "title": "ask:Go on?",
    }
    only = await cli_json(
        srv, "tasks", "list", "--state", "input-required", "--owner", "anonymous", "--since", "1h"
    )
    assert waiting["id"] in [t["id"] for t in only] and all(t["state"] == "input-required" for t in only)
    assert await cli_json(srv, "tasks", "list", "--owner", "nobody") == []
    code, table, _ = await cli(srv, "tasks", "list", "--context", "admin-ctx")
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split() == ["ID", "STATE", "ROLE", "OWNER", "CONTEXT", "UPDATED", "TITLE"]
    assert lines[1].startswith(waiting["id"]) and "input-required" in lines[1] and "ask:Go on?" in lines[1]

    shown = await cli_json(srv, "tasks", "show", done["id"])
    assert shown["task"]["id"] == done["id"] and shown["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in shown["task"]["history"]][:1] == ["ROLE_USER"]
    assert shown["task"]["artifacts"] and shown["owner"] == "anonymous" and shown["role"] == "default"
    states = [t["state"] for t in shown["task"]["metadata"]["stateTransitions"]]
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
    assert shown["lease"] is None and shown["lastSeq"] >= 3
    (push,) = shown["push"]
    assert push["url"] == hook["url"] and push["delivered"] >= 1 and push["version"] == "0.3"
    (row,) = shown["usage"]["rows"]
    assert (row["model"], row["input_tokens"], row["output_tokens"], row["cost_usd"]) == ("m1", 10, 5, 0.25)
    assert shown["usage"]["sum"]["costUsd"] == 0.25

    live = await cli_json(srv, "tasks", "show", waiting["id"])
    assert live["lease"]["holder"] and live["lease"]["expired"] is False  # its run waits on the server
    code, text, _ = await cli(srv, "tasks", "show", done["id"])
    assert code == 0
    for section in ("transitions", "history", "artifacts", "push deliveries (1)", "usage (1 rows)"):
        assert f"\n{section}" in text, section
    assert "hello there" in text and "m1" in text

    code, _, err = await cli(srv, "tasks", "show", "no-such-task")
    assert code == 1 and err.strip() == "error: task no-such-task not found"
    await result(client, "message/send", {"message": text_message("yes", taskId=waiting["id"])})


async def test_tail_prints_events_as_they_come(srv, client):
    waiting = await result(
        client, "message/send", {"message": text_message("ask:Ready?;say:after the answer")}
    )
    assert waiting["status"]["state"] == "input-required"
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "a2a-server"),
        "tasks",
        "tail",
        waiting["id"],
        "--json",
        cwd=ROOT,
        env=srv.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(60):
            # What the log held when it started, up to the question...
            while (
                not seen
                or "statusUpdate" not in seen[-1]
                or seen[-1]["statusUpdate"]["status"]["state"] != ("TASK_STATE_INPUT_REQUIRED")
            ):
                seen.append(json.loads(await proc.stdout.readline()))
            asked = len(seen)
            # ...then what the answer makes, as it is committed, until the task ends and tail exits.
            await result(client, "message/send", {"message": text_message("yes", taskId=waiting["id"])})
            while line := await proc.stdout.readline():
                seen.append(json.loads(line))
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(set(seqs))
    after = seen[asked:]
    texts = json.dumps(after)
    assert "answer:yes" in texts and "after the answer" in texts
    assert after[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    code, text, _ = await cli(srv, "tasks", "tail", waiting["id"], "-n", "2")
    assert code == 0 and len(text.splitlines()) == 2 and "completed" in text.splitlines()[-1]


async def cancel_running(srv: ServerProcess, client: httpx.AsyncClient, redis: bool) -> str:
    """Cancel with the CLI a task whose agent sleeps on the server; a stream open on it on the server sees
    the cancel, and the server's run stops. Its output."""
    task = await start(client, "sleep:600;say:too late")
    await until(lambda: _working(client, task["id"]))
    assert await metric(client, RUNS) == 1
    opened = asyncio.Event()
    stream = asyncio.create_task(_follow(client, task["id"], opened))
    await asyncio.wait_for(opened.wait(), 60)  # it has its snapshot (working): the cancel comes as an event
    code, out, err = await cli(srv, "tasks", "cancel", task["id"], redis=redis)
    assert code == 0, err
    assert out.startswith(f"task {task['id']}: canceled (")
    last = await asyncio.wait_for(stream, 60)
    assert last["status"]["state"] == "canceled" and last["final"] is True
    assert last["status"]["message"]["parts"][0]["text"] == "Task canceled by an administrator"
    await until(lambda: _runs(client, 0))  # the agent's run on the server has stopped
    got = await until(lambda: _ended(client, task["id"]))
    assert got["status"]["state"] == "canceled"
    said = [m for m in got.get("history", []) if m["role"] == "agent"] + got.get("artifacts", [])
    assert "too late" not in json.dumps(said)  # the agent never got past its sleep
    return out


async def _follow(client: httpx.AsyncClient, task_id: str, opened: asyncio.Event) -> dict[str, Any]:
    """Resubscribe to the task on the server (`opened` set at its first event); the stream's last event."""
    body = {"jsonrpc": "2.0", "id": 3, "method": "tasks/resubscribe", "params": {"id": task_id}}
    last: dict[str, Any] = {}
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
        async for sse in src.aiter_sse():
            if sse.data:
                last = json.loads(sse.data)["result"]
                opened.set()
    return last


async def _ended(client: httpx.AsyncClient, task_id: str) -> dict[str, Any] | None:
    got = await state_of(client, task_id)
    return got if got["status"]["state"] == "canceled" else None


async def _working(client: httpx.AsyncClient, task_id: str) -> bool:
    return (await state_of(client, task_id))["status"]["state"] == "working"


async def _runs(client: httpx.AsyncClient, n: int) -> bool:
    return await metric(client, RUNS) == n


async def test_cancel_stops_the_agent_running_on_the_server(srv, client):
    if "REDIS_URL" in srv.env:
        out = await cancel_running(srv, client, redis=True)
        assert "which held it" in out  # the server did it, told over the bus
    out = await cancel_running(srv, client, redis=False)
    assert "could not be reached" in out and "lease was taken over" in out


async def test_cancel_a_waiting_task_and_refusals(srv, client):
    waiting = await result(client, "message/send", {"message": text_message("ask:Well?")})
    canceled = await cli_json(srv, "tasks", "cancel", waiting["id"], "--reason", "Closed by ops")
    assert canceled["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    # Without Redis the server learns of it at its next heartbeat and answers from its memory till then.
    got = await until(lambda: _ended(client, waiting["id"]))
    assert got["status"]["message"]["parts"][0]["text"] == "Closed by ops"
    await until(lambda: _runs(client, 0))

    code, _, err = await cli(srv, "tasks", "cancel", waiting["id"])
    assert code == 1 and "already canceled" in err
    code, _, err = await cli(srv, "tasks", "cancel", "no-such-task")
    assert code == 1 and "not found" in err


async def test_prune_on_demand(srv, client):
    engine = create_engine(srv.database_url)
    try:
        # No webhooks: the server's deliverer would be working through their outbox meanwhile.
        old = await fill(engine, 30, Spec(at=utcnow() - timedelta(days=45), tag="prune-cli", push=False))
    finally:
        await engine.dispose()
    dry = await cli_json(srv, "prune", "--older-than", "30d", "--dry-run")
    assert dry["dryRun"] is True and dry["rows"]["tasks"] == 30 and dry["rows"]["events"] == 120
    assert (await cli_json(srv, "tasks", "show", old[0]))["task"]["id"] == old[0]
    code, out, err = await cli(srv, "prune", "--older-than", "30d")
    assert code == 0, err
    assert out.splitlines()[0].endswith(": 30 deleted")
    assert re.search(r"^messages\s+60$", out, re.M) and re.search(r"^idempotency_keys\s+30$", out, re.M)
    code, _, err = await cli(srv, "tasks", "show", old[0])
    assert code == 1 and "not found" in err
    again = await cli_json(srv, "prune", "--older-than", "30d")
    assert again["rows"]["tasks"] == 0
    code, _, err = await cli(srv, "prune", "--older-than", "soon")
    assert code != 0 and "not an age" in err
    # The server kept serving.
    assert (await result(client, "message/send", {"message": text_message("say:still here")}))["status"][
        "state"
    ] == "completed"
