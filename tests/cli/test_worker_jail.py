"""A remote worker runs its role's CLI jailed exactly as a replica does: the `ndjson` adapter with a fake
executable in bubblewrap, its workspace on the worker's side, and a cancel sent to the server stops the CLI's
whole process tree in the worker."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import httpx

from app.api.edge.auth import hash_key
from scripts.ready import log_tail
from tests.conftest import make_server
from tests.support.clis import FAKES, alive, find_process, response_text, send_message, wait_for_process
from tests.support.rpc import result
from tests.support.secrets import remember
from tests.support.server import BIN, ROOT

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
NDJSON = shlex.join([PYTHON, str(FAKES / "ndjson_agent.py")])
KEY = "box-" + os.urandom(8).hex()
remember(KEY)
WAIT_S = 90.0
"""How long a worker may take to start and register (a process start on a busy machine): a wait on a state."""


def _start_worker(server_url: str, agents: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "A2A_WORKER_KEY": KEY,
        "AGENTS": agents,
        "AGENT_WORKSPACE_ROOT": str(tmp_path / "worker-ws"),
        "CANCEL_GRACE_S": "2",
    }
    with open(tmp_path / "worker.log", "ab") as log:
        return subprocess.Popen(
            [
                str(BIN / "a2a-server"),
                "worker",
                "--server",
                server_url,
                "--role",
                "coder",
                "--instance",
                "t1",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )


async def until_available(server_url: str, role: str, worker: subprocess.Popen[bytes], log: Path) -> None:
    """Once the server's discovery lists `role` available (the worker has registered); at once, with the
    worker's log, if it exits first."""
    async with httpx.AsyncClient(base_url=server_url, timeout=30) as c:
        try:
            async with asyncio.timeout(WAIT_S):
                while True:
                    if worker.poll() is not None:
                        raise AssertionError(
                            f"the worker exited ({worker.returncode}); {log}:\n{log_tail(log, 40)}"
                        )
                    roles = (await c.get("/agents")).json()["roles"]
                    if any(r["role"] == role and r["available"] for r in roles):
                        return
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise AssertionError(
                f"{role} not available after {WAIT_S:.0f}s; {log}:\n{log_tail(log, 40)}"
            ) from None


async def test_a_worker_runs_its_cli_in_the_jail_and_a_cancel_stops_the_tree(tmp_path: Path) -> None:
    coder = {"adapter": "ndjson", "command": NDJSON, "sandbox_read": [str(FAKES)]}
    agents = json.dumps({"default": {"adapter": "echo"}, "coder": coder})
    server = await make_server(
        "sqlite",
        tmp_path / "server",
        AGENTS=agents,
        AGENT_ROLES="default",
        WORKER_KEYS=json.dumps({hash_key(KEY): "box"}),
    )
    worker = _start_worker(server.base_url, agents, tmp_path)
    try:
        await until_available(server.base_url, "coder", worker, tmp_path / "worker.log")
        async with httpx.AsyncClient(base_url=server.base_url + "/agents/coder", timeout=60) as client:
            done = await send_message(client, "hello")
            assert done["status"]["state"] == "completed", done["status"]
            assert "hello" in response_text(done)
            workspaces = list((tmp_path / "worker-ws").glob(f"*/{done['contextId']}"))
            assert workspaces, "the CLI worked in a workspace on the worker's side"

            marker = f"sleep 300.{uuid.uuid4().int % 10_000_000:07d}"
            task = await send_message(client, f"SLEEP {marker.split()[1]}", blocking=False)
            sleeper = await wait_for_process(marker, within_s=60)
            canceled = await result(client, "tasks/cancel", {"id": task["id"]})
            assert canceled["status"]["state"] == "canceled"
            async with asyncio.timeout(30):
                while alive(sleeper) or find_process(marker) is not None:
                    await asyncio.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
        server.stop()
