"""`WORKERS=2`: two server processes on one port, each a replica of its own (`<REPLICA_ID>/<pid>`) sharing
PostgreSQL and Redis. Both are listed as instances, and streams of a task served by the worker that does not
run it get every event in order, through the bus, as across replicas. Without Redis or PostgreSQL the
setting is refused with one clear line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import _fresh_pg_database
from tests.support.rpc import send, sse_data
from tests.support.server import BIN, ROOT, ServerProcess, free_port

WAIT_S = 60.0
"""A guard against a hang, never a timing assertion: every wait ends on its condition."""
CHUNKS = 8
SCRIPT = ";".join(f"say:c{i};sleep:0.25" for i in range(CHUNKS))


@pytest.fixture
async def workers(tmp_path: Path):
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are needed: `make test` sets both")
    server = ServerProcess(
        await _fresh_pg_database(pg),
        tmp_path / "server.log",
        WORKERS="2",
        REDIS_URL=redis,
        REPLICA_ID="w-test",
        LOG_LEVEL="info",
        LOG_FORMAT="json",
        DISCOVERY_HEARTBEAT_S="0.3",
        GRPC_PORT=str(free_port()),
    )
    server.migrate()
    server.start()
    yield server
    server.stop()


async def instances(url: str) -> set[str]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        resp = await client.get("/agents")
        assert resp.status_code == 200, resp.text
        return {a["name"] for a in resp.json()["agents"]}


async def follow(url: str, task_id: str) -> list[dict]:
    """A resubscribe on a connection of its own (any worker may accept it), read to its end."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": task_id}}
    async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as client:
        resp = await client.post("/a2a/jsonrpc", json=body)
    assert resp.status_code == 200, resp.text
    return [d["result"] for d in sse_data(resp.text)]


def _grpc_lines(log: Path) -> set[str]:
    """The replicas whose start-up line says they listen for gRPC."""
    return {json.loads(line)["replica"] for line in log.read_text().splitlines() if "gRPC on" in line}


def served_by(log: Path, task_id: str) -> set[str]:
    """The replicas whose access lines name the task."""
    replicas = set()
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("logger") == "uvicorn.access" and record.get("task_id") == task_id:
                replicas.add(record["replica"])
    return replicas


async def test_two_workers_are_two_replicas_and_stream_each_others_tasks(workers: ServerProcess):
    async with asyncio.timeout(WAIT_S):
        while len(names := await instances(workers.base_url)) < 2:
            await asyncio.sleep(0.1)
    assert all(n.startswith("default:w-test/") for n in names), names
    # Both listen for gRPC on the one port too (SO_REUSEPORT among siblings). A worker may be listed before
    # its start-up line reaches the log: wait for both lines.
    replicas = {n.split(":", 1)[1] for n in names}
    async with asyncio.timeout(WAIT_S):
        while (listening := _grpc_lines(workers.log_path)) != replicas:
            assert listening <= replicas, listening
            await asyncio.sleep(0.1)

    # Accepting is the kernel's choice: a few tasks until both workers have served streams of one.
    for _ in range(5):
        async with httpx.AsyncClient(base_url=workers.base_url, timeout=WAIT_S) as client:
            task = await send(client, SCRIPT, blocking=False)
        streams = await asyncio.gather(*(follow(workers.base_url, task["id"]) for _ in range(8)))
        for events in streams:
            # The snapshot's text, then each chunk after it: every chunk once, in order.
            snapshot, *updates = events
            text = [p.get("text", "") for a in snapshot.get("artifacts", []) for p in a["parts"]]
            text += [
                p.get("text", "")
                for e in updates
                if e["kind"] == "artifact-update"
                for p in e["artifact"]["parts"]
            ]
            assert "".join(text) == "".join(f"c{i}" for i in range(CHUNKS))
            # A stream opened once the task had ended (a busy machine) is its snapshot alone.
            last = updates[-1] if updates else snapshot
            assert last["kind"] in ("status-update", "task") and last["status"]["state"] == "completed"
        if len(served_by(workers.log_path, task["id"])) == 2:
            break
    else:
        pytest.fail("five tasks' streams were all accepted by one worker")
    assert served_by(workers.log_path, task["id"]) <= {n.split(":", 1)[1] for n in names}


@pytest.mark.parametrize(
    ("env", "needs"),
    [
        ({"DATABASE_URL": "postgresql+asyncpg://u@127.0.0.1:1/x"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "PostgreSQL"),
    ],
)
def test_workers_without_what_they_share_is_refused(env: dict[str, str], needs: str, tmp_path: Path):
    out = subprocess.run(
        [str(BIN / "a2a-server"), "serve"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/a.db", "WORKERS": "2", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("error: invalid setting WORKERS:"), out.stderr
    assert needs in out.stderr
