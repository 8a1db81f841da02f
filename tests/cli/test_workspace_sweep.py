"""Cleanup end to end: a real server process (SQLite) runs the fake coding agent on a checkout of a bare
repository; once the task's context has ended past TASK_RETENTION_DAYS its workspace goes, its work stays
in the mirror under `refs/a2a/kept/`, and /metrics says so (the server's own sweep); `a2a-server prune`
sweeps the same way and reports the disk freed, in text and JSON, and what it would free with --dry-run; a
remote worker sweeps its own disk, asking the server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.agents.cli.sweep import KEPT, MARKS, disk_bytes
from app.agents.repos.source import RepoSource
from app.api.edge.auth import hash_key
from tests.agents.repos.conftest import git
from tests.cli.test_repository import AGENT, FAKES, PYTHON, Served, make_origin, send, summary_v03
from tests.conftest import make_server
from tests.support.clis import send_message
from tests.support.secrets import remember
from tests.support.server import BIN, ROOT, ServerProcess
from tests.support.worker import WorkerProcess, until_listed

NDJSON = shlex.join([PYTHON, str(FAKES / "ndjson_agent.py")])
WORKER_KEY = "sweep-" + os.urandom(8).hex()
remember(WORKER_KEY)
RETENTION_DAYS = "0.0001"
"""About 9 s: the server's own retention pass deletes the task and its sweep removes the workspace soon
after the task ended, while the test waits."""


async def serve(tmp: Path, **env: str) -> tuple[ServerProcess, Served]:
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    server = await make_server(
        "sqlite",
        tmp,
        AGENTS=json.dumps({"default": {"adapter": "ndjson"}}),
        AGENT_COMMAND=AGENT,
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        AGENT_SANDBOX_READ=str(FAKES),
        REPO_ALLOW=str(allowed),
        REPO_CACHE_ROOT=str(tmp / "cache"),
        **env,
    )
    client = httpx.AsyncClient(base_url=server.base_url, timeout=60)
    return server, Served(client, tmp, allowed / "project.git", allowed, tmp / "elsewhere")


@pytest.fixture
async def swept(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, Served]]:
    server, served = await serve(tmp_path, TASK_RETENTION_DAYS=RETENTION_DAYS, RETENTION_INTERVAL_S="0.5")
    try:
        yield server, served
    finally:
        await served.client.aclose()
        server.stop()


@pytest.fixture
async def kept(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, Served]]:
    server, served = await serve(tmp_path, TASK_RETENTION_DAYS="0")
    try:
        yield server, served
    finally:
        await served.client.aclose()
        server.stop()


async def metrics(client: httpx.AsyncClient) -> dict[str, float]:
    text = (await client.get("/metrics")).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(a2a_\w+) (\S+)$", text, re.M)}


def kept_refs(served: Served) -> dict[str, str]:
    mirror = served.root / "cache" / f"{RepoSource(served.url).key}.git"
    found = git("--git-dir", str(mirror), "for-each-ref", "--format=%(refname) %(objectname)", KEPT)
    return dict(line.split() for line in found.splitlines())


async def admin(server: ServerProcess, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "a2a-server"),
        *args,
        cwd=ROOT,
        env=server.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_the_servers_sweep_removes_an_ended_contexts_checkout_and_keeps_its_branch(swept) -> None:
    _, served = swept
    task = await send(served, "EDIT", {"url": served.url})
    assert task["status"]["state"] == "completed", task["status"]
    head = summary_v03(task)["head"]
    ws = served.workspace(task["contextId"])
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]

    async with asyncio.timeout(120):
        while (await metrics(served.client)).get("a2a_workspaces_removed_total", 0) < 1:
            await asyncio.sleep(0.2)
    assert not ws.exists()
    assert not (ws.parent / MARKS / f"{ws.name}.json").exists()
    ((ref, sha),) = kept_refs(served).items()
    assert ref.startswith(f"{KEPT}{branch}/") and sha == head
    got = await metrics(served.client)
    assert got["a2a_workspaces_freed_bytes_total"] > 0
    assert got["a2a_repo_cache_bytes"] > 0
    assert got["a2a_workspace_sweep_last_timestamp_seconds"] > 0
    assert "a2a_workspace_bytes" in got and "a2a_workspaces" in got


async def test_prune_reports_what_it_would_free_then_frees_it(kept) -> None:
    server, served = kept
    task = await send(served, "EDIT", {"url": served.url})
    assert task["status"]["state"] == "completed", task["status"]
    ws = served.workspace(task["contextId"])
    size = disk_bytes(ws)
    assert size > 0

    text = await admin(server, "prune", "--older-than", "0s", "--dry-run")
    assert f"1 would be removed, {size} bytes would free" in text, text
    dry = json.loads(await admin(server, "prune", "--older-than", "0s", "--dry-run", "--json"))
    assert dry["workspaces"] | {"leftBytes": None} == {
        "removed": 1,
        "freedBytes": size,
        "keptRefs": 0,
        "keptRefsPruned": 0,
        "busy": 0,
        "left": 0,
        "leftBytes": None,
        "unmarked": 0,
    }
    assert ws.is_dir() and kept_refs(served) == {}

    text = await admin(server, "prune", "--older-than", "0s")
    assert "tasks that ended before" in text and f"1 removed, {size} bytes freed" in text, text
    assert "their branches kept in the repository cache: 1" in text, text
    assert not ws.exists()
    assert list(kept_refs(served).values()) == [summary_v03(task)["head"]]


async def test_a_remote_worker_sweeps_its_own_disk_asking_the_server(tmp_path: Path) -> None:
    """A worker has no database: it asks `/workers/v1/contexts`, where only its role's tasks count."""
    coder = {"adapter": "ndjson", "command": NDJSON, "sandbox_read": [str(FAKES)]}
    agents = {"default": {"adapter": "echo"}, "coder": coder}
    server = await make_server(
        "sqlite",
        tmp_path / "server",
        AGENTS=json.dumps(agents),
        AGENT_ROLES="default",
        WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "box"}),
    )
    worker = WorkerProcess(
        server.base_url,
        tmp_path / "worker.log",
        "w1",
        key=WORKER_KEY,
        agents=agents,
        role="coder",
        env={
            "AGENT_WORKSPACE_ROOT": str(tmp_path / "worker-ws"),
            "TASK_RETENTION_DAYS": RETENTION_DAYS,
            "RETENTION_INTERVAL_S": "0.5",
        },
    )
    worker.start()
    try:
        await until_listed(server.base_url, "coder", True)
        async with httpx.AsyncClient(base_url=server.base_url + "/agents/coder", timeout=60) as client:
            done = await send_message(client, "hello")
            assert done["status"]["state"] == "completed", done["status"]
            waiting = await send_message(client, "ASK")
            assert waiting["status"]["state"] == "input-required", waiting["status"]
        (ended,) = (tmp_path / "worker-ws").glob(f"*/{done['contextId']}")
        (asking,) = (tmp_path / "worker-ws").glob(f"*/{waiting['contextId']}")

        async with asyncio.timeout(120):
            while ended.exists():
                await asyncio.sleep(0.2)
        assert asking.is_dir(), "a context waiting for input keeps its workspace"
        assert "workspace sweep failed" not in worker.log()

        async with httpx.AsyncClient(base_url=server.base_url, headers={"X-API-Key": WORKER_KEY}) as c:
            ask = {"instance": "probe", "contexts": [["anonymous", done["contextId"]]]}
            mine = (await c.post("/workers/v1/contexts", json={"role": "coder", **ask})).json()
            assert [row[:3] for row in mine["contexts"]] == [["anonymous", done["contextId"], 0]]
            other = (await c.post("/workers/v1/contexts", json={"role": "default", **ask})).json()
            assert other == {"contexts": []}, "another role's tasks are not this role's to tell"
            bad = await c.post("/workers/v1/contexts", json={"role": "coder", "instance": "p", "contexts": 3})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"
    finally:
        worker.stop()
        server.stop()
