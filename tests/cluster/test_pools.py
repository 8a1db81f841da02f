"""Pools: two replicas on one PostgreSQL and Redis, each running one role's agents (`AGENT_ROLES`), both
serving calls for both roles. A task runs only where its role runs, whichever replica took the call; an
answer to a waiting task, sent to the replica that does not run its role, resumes it where the role runs."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import migrated_pg_database
from tests.support.server import ServerProcess, until_available

AGENTS = {
    "reviewer": {"adapter": "scripted"},
    "triager": {"adapter": "scripted", "card": {"name": "Triager"}},
}
WAIT_S = 60


@pytest.fixture
async def pools(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ServerProcess]]:
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both")
    db = await migrated_pg_database(pg)
    common = {"AGENTS": json.dumps(AGENTS), "REDIS_URL": redis, "QUEUE_POLL_S": "0.5"}
    servers = [
        ServerProcess(db, tmp_path / f"{role}.log", AGENT_ROLES=role, **common)
        for role in ("reviewer", "triager")
    ]
    try:
        for s in servers:
            s.start()
        await until_available(servers, AGENTS)
        yield servers[0], servers[1]
    finally:
        for s in servers:
            s.stop()


async def rpc(c: httpx.AsyncClient, path: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = (await c.post(f"{path}/a2a/jsonrpc", json=body)).json()
    assert "result" in resp, resp
    return resp["result"]


def msg(text: str, **extra: Any) -> dict[str, Any]:
    mid = f"m-{os.urandom(4).hex()}"
    return {
        "kind": "message",
        "messageId": mid,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


async def running(server: ServerProcess) -> int:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        return (await c.get("/healthz")).json()["runningAgents"]


async def until_state(c: httpx.AsyncClient, path: str, task_id: str, states: set[str]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            task = await rpc(c, path, "tasks/get", {"id": task_id})
            if task["status"]["state"] in states:
                return task
            await asyncio.sleep(0.1)


def texts(task: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


async def test_a_task_runs_only_where_its_role_runs(pools: tuple[ServerProcess, ServerProcess]):
    reviewers, triagers = pools
    for taker, runner, idle, path in (
        (reviewers, triagers, reviewers, "/agents/triager"),
        (triagers, reviewers, triagers, ""),
    ):
        async with httpx.AsyncClient(base_url=taker.base_url, timeout=30) as c:
            # The run waits on its user (a waiting run counts as running) until the counts are read.
            task = await rpc(
                c,
                path,
                "message/send",
                {"message": msg("say:start;ask:go?;say:end"), "configuration": {"blocking": False}},
            )
            await until_state(c, path, task["id"], {"input-required"})
            assert await running(runner) == 1, "the replica running the role runs it"
            assert await running(idle) == 0, "the replica that took the call does not"
            answer = msg("yes", taskId=task["id"], contextId=task["contextId"])
            await rpc(c, path, "message/send", {"message": answer, "configuration": {"blocking": False}})
            done = await until_state(c, path, task["id"], {"completed", "failed"})
            assert done["status"]["state"] == "completed" and "end" in texts(done)


async def test_an_answer_taken_where_the_role_does_not_run_resumes_where_it_does(
    pools: tuple[ServerProcess, ServerProcess],
):
    reviewers, _ = pools
    path = "/agents/triager"
    async with httpx.AsyncClient(base_url=reviewers.base_url, timeout=30) as c:
        task = await rpc(
            c,
            path,
            "message/send",
            {"message": msg("ask:proceed?;say:after"), "configuration": {"blocking": False}},
        )
        await until_state(c, path, task["id"], {"input-required"})
        answer = msg("yes", taskId=task["id"], contextId=task["contextId"])
        await rpc(c, path, "message/send", {"message": answer, "configuration": {"blocking": False}})
        done = await until_state(c, path, task["id"], {"completed", "failed"})
    assert done["status"]["state"] == "completed", done["status"]
    assert "after" in texts(done)
    assert await running(reviewers) == 0
