"""Repository in, change out, on a remote worker: one replica (PostgreSQL, Redis, behind nginx) serves the
role `coder` (the `ndjson` adapter with the fake coding agent of tests/support/fakes/repo_agent.py) and runs
none of its agents; one `a2a-server worker` runs them, with its own REPO_ALLOW, REPO_CACHE_ROOT and
AGENT_WORKSPACE_ROOT. The replica's REPO_ALLOW is the gate at the edge (and what the card declares), the
worker's is checked again before its disk is touched; the checkout is made on the worker's side and the task
publishes the same artifacts as on a replica (`tests/cli/test_repository.py`)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.cli.repository import EXTENSION_URI
from app.agents.jail.sandbox import principal_key
from app.agents.repos.source import RepoSource
from app.api.edge.auth import hash_key
from tests.agents.repos.conftest import git, tree_of
from tests.cli.test_repository import AGENT, diff_v03, make_origin, summary_v03
from tests.conftest import migrated_pg_database
from tests.support import worker as workers
from tests.support.auth import api_keys_env, key_of
from tests.support.clis import FAKES, response_text, status_text
from tests.support.cluster import Cluster
from tests.support.secrets import remember
from tests.support.worker import WorkerProcess

WORKER_KEY = "worker-" + os.urandom(8).hex()
remember(WORKER_KEY)
CODER = {"adapter": "ndjson"}
AGENTS = {"default": {"adapter": "scripted"}, "coder": CODER}
"""The replica runs the default role's agents only (`AGENT_ROLES`); the worker runs the coder's."""
ROLE = "/agents/coder"
WAIT_S = 90
STOPPED = {"completed", "failed", "canceled", "rejected", "input-required"}


@dataclass
class Team:
    client: httpx.AsyncClient
    root: Path
    project: Path
    """Allowed by the replica and by the worker."""
    other: Path
    """Allowed by the replica's REPO_ALLOW, not by the worker's."""
    worker: WorkerProcess

    def workspace(self, side: str, context_id: str) -> Path:
        return self.root / side / "ws" / principal_key("alice") / context_id

    def mirror(self, side: str, bare: Path) -> Path:
        return self.root / side / "cache" / f"{RepoSource(f'file://{bare}').key}.git"


def sides(root: Path, side: str, allow: Path) -> dict[str, str]:
    """The repository settings of one side (`replica` or `worker`), each in its own folders."""
    return {
        "AGENT_COMMAND": AGENT,
        "AGENT_SANDBOX_READ": str(FAKES),
        "AGENT_WORKSPACE_ROOT": str(root / side / "ws"),
        "REPO_CACHE_ROOT": str(root / side / "cache"),
        "REPO_ALLOW": str(allow),
    }


@pytest.fixture(scope="module")
async def team(tmp_path_factory: Any) -> AsyncIterator[Team]:
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both")
    root = tmp_path_factory.mktemp("worker-repos")
    allowed = root / "remote"
    make_origin(allowed / "project.git", root / "work")
    make_origin(allowed / "other.git", root / "work-other")
    db = await migrated_pg_database(pg)
    env = api_keys_env(
        AGENTS=json.dumps(AGENTS),
        AGENT_ROLES="default",
        WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "dev-vm"}),
        LEASE_TTL_S="10",
        QUEUE_POLL_S="0.5",
        DISCOVERY_HEARTBEAT_S="1",
        DISCOVERY_MAX_AGE_S="10",
        **sides(root, "replica", allowed),
    )
    cl = Cluster(db, redis, root / "cluster", 1, migrated=True, **env)
    await asyncio.to_thread(cl.start)
    worker = WorkerProcess(
        cl.nginx_url,
        root / "worker.log",
        "vm1",
        key=WORKER_KEY,
        agents={"coder": CODER},
        role="coder",
        slots=2,
        env=sides(root, "worker", allowed / "project.git"),
    )
    worker.start()
    try:
        try:
            await workers.until_listed(cl.nginx_url, "coder", True, key_of("alice"), WAIT_S)
        except TimeoutError:
            pytest.fail(f"the worker was never listed in GET /agents; its log ends:\n{worker.log()[-4000:]}")
        async with httpx.AsyncClient(base_url=cl.nginx_url, timeout=60, headers=key_of("alice")) as client:
            yield Team(client, root, allowed / "project.git", allowed / "other.git", worker)
    finally:
        worker.stop()
        await asyncio.to_thread(cl.stop)


async def send(
    team: Team, text: str, repository: Any = None, parts: list | None = None, **fields: Any
) -> dict[str, Any]:
    """`message/send` (v0.3, not blocking) to the coder, and the task once its turn ended."""
    message: dict[str, Any] = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}, *(parts or [])],
        **fields,
    }
    if repository is not None:
        message["metadata"] = {"repository": repository}
    params = {"message": message, "configuration": {"blocking": False}}
    task = await rpc(team, "message/send", params)
    async with asyncio.timeout(WAIT_S):
        while task["status"]["state"] not in STOPPED:
            await asyncio.sleep(0.1)
            task = await rpc(team, "tasks/get", {"id": task["id"]})
    return task


async def rpc(team: Team, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    data = (await team.client.post(f"{ROLE}/a2a/jsonrpc", json=body)).json()
    assert "result" in data, data
    return data["result"]


async def test_a_remote_worker_produces_the_same_artifacts_from_a_checkout_on_its_side(
    team: Team, tmp_path: Path
) -> None:
    card = (await team.client.get(f"{ROLE}/.well-known/agent-card.json")).json()
    assert EXTENSION_URI in [e["uri"] for e in card["capabilities"].get("extensions", [])], card

    task = await send(team, "EDIT", {"url": f"file://{team.project}", "ref": "main"})
    assert task["status"]["state"] == "completed", (task["status"], team.worker.log()[-3000:])
    context = task["contextId"]
    ws = team.workspace("worker", context)
    branch = "a2a/" + context.replace("-", "")[:8]
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == branch
    assert git("status", "--porcelain", cwd=ws) == "", "the worker committed what the agent left"
    assert not team.workspace("replica", context).exists(), "no checkout on the replica's side"
    assert team.mirror("worker", team.project).is_dir()
    assert not team.mirror("replica", team.project).exists(), "the replica fetched nothing"

    summary = summary_v03(task)
    assert (summary["branch"], summary["head"]) == (branch, git("rev-parse", "HEAD", cwd=ws))
    assert summary["base"] == git("rev-parse", "main", cwd=team.project)
    assert sorted((f["path"], f["status"]) for f in summary["files"]) == [
        ("blob.bin", "added"),
        ("notes.md", "added"),
        ("old.txt", "deleted"),
        ("src/app.py", "modified"),
    ]
    assert [c["subject"] for c in summary["commits"]] == ["agent: main returns 2", "EDIT"]
    assert summary["turn"]["number"] == 1 and summary["turn"]["files"] == summary["files"]
    patch = diff_v03(task, "changes.diff")
    assert diff_v03(task, "turn-1.diff") == patch
    fresh = tmp_path / "fresh"
    git("clone", "--quiet", str(team.project), str(fresh))
    git("checkout", "--quiet", summary["base"], cwd=fresh)
    git("apply", "--index", cwd=fresh, input=patch)
    assert tree_of(fresh) == tree_of(ws)

    # A question ends a turn on the worker, the answer (sent to the replica) starts the next one there.
    asked = await send(team, "ASK", contextId=context)
    assert asked["status"]["state"] == "input-required", asked["status"]
    assert b"+- before asking" in diff_v03(asked, "turn-1.diff")
    done = await send(team, "yes", contextId=context, taskId=asked["id"])
    assert done["status"]["state"] == "completed", done["status"]
    second = summary_v03(done)
    assert second["turn"]["number"] == 2 and second["base"] == summary["base"]
    assert [f["path"] for f in second["turn"]["files"]] == ["CHANGES.md"]
    assert b"+- after yes" in diff_v03(done, "turn-2.diff")
    assert second["head"] == git("rev-parse", "HEAD", cwd=ws)


async def test_an_attached_file_reaches_the_workers_checkout(team: Team) -> None:
    content = "the spec, line one\n"
    part = {
        "kind": "file",
        "file": {"bytes": base64.b64encode(content.encode()).decode(), "name": "docs/spec.txt"},
    }
    task = await send(team, "FILES", {"url": f"file://{team.project}"}, parts=[part])
    assert task["status"]["state"] == "completed", task["status"]
    assert json.loads(response_text(task).split("worked in")[0]) == {"attachments/docs/spec.txt": content}
    ws = team.workspace("worker", task["contextId"])
    assert (ws / "attachments" / "docs" / "spec.txt").read_text() == content
    assert summary_v03(task)["files"] == [], "attachments are never the change"


async def test_the_worker_checks_its_own_repo_allow_before_touching_its_disk(team: Team) -> None:
    task = await send(team, "EDIT", {"url": f"file://{team.other}"})
    assert task["status"]["state"] == "failed", task["status"]
    reason = status_text(task)
    assert reason.startswith("The task's workspace could not be prepared on worker vm1:"), reason
    assert "the worker's REPO_ALLOW" in reason, reason
    assert not team.mirror("worker", team.other).exists(), "the refused repository was never fetched"
    assert not team.workspace("worker", task["contextId"]).exists()


async def test_the_replicas_repo_allow_is_the_gate_at_the_edge(team: Team) -> None:
    outside = team.root / "elsewhere.git"
    make_origin(outside, team.root / "work-elsewhere")
    message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": "EDIT"}],
        "metadata": {"repository": {"url": f"file://{outside}"}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    data = (await team.client.post(f"{ROLE}/a2a/jsonrpc", json=body)).json()
    assert data["error"]["code"] == -32602 and "REPO_ALLOW" in data["error"]["message"], data
    assert not team.mirror("worker", outside).exists()
