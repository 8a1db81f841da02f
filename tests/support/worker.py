"""A remote worker process (`a2a-server worker`) for tests and the soak, and waiting for discovery to list it.

`WorkerProcess(server_url, log_path, instance, key=..., agents=..., role=...)`: `start()` (no wait: the worker
connects out on its own), `kill()` (SIGKILL, as a crash), `stop()` (SIGTERM, a clean exit), `log()`,
`started()` (how many times its log says it serves its role). `until_listed(base, role, available)` polls
`GET /agents` until the role's availability is as asked: a worker is ready once it is listed there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx

from scripts.cluster import _end
from tests.support.server import BIN, ROOT


class WorkerProcess:
    """One `a2a-server worker` process serving `role` through `server_url` with the worker key `key`;
    `agents` is its `AGENTS` (an entry for the role, as on a replica)."""

    def __init__(
        self,
        server_url: str,
        log_path: Path,
        instance: str,
        *,
        key: str,
        agents: dict[str, Any],
        role: str,
        slots: int = 4,
        env: dict[str, str] | None = None,
    ) -> None:
        self.server_url = server_url
        self.log_path = log_path
        self.instance = instance
        self.key = key
        self.agents = agents
        self.role = role
        self.slots = slots
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        env = {
            **os.environ,
            "A2A_WORKER_KEY": self.key,
            "AGENTS": json.dumps(self.agents),
            "LOG_LEVEL": "info",
            **self.env,
        }
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    str(BIN / "a2a-server"),
                    "worker",
                    "--server",
                    self.server_url,
                    "--role",
                    self.role,
                    "--instance",
                    self.instance,
                    "--slots",
                    str(self.slots),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def started(self) -> int:
        """How many lives of this worker have reached the server and serve their role (the start-up line)."""
        return self.log().count(f"serving role {self.role} ")

    def kill(self) -> None:
        """SIGKILL: no goodbye, as in a crash."""
        _end(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit (SIGKILL after 15 s)."""
        _end(self.proc, signal.SIGTERM)


async def listing(base: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """`GET /agents`: every live instance and every configured role."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        resp = await c.get("/agents", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def until_listed(
    base: str, role: str, available: bool, headers: dict[str, str] | None = None, within: float = 90
) -> dict[str, Any]:
    """Poll `GET /agents` until `role` is listed as available (or not); TimeoutError after `within`."""
    async with asyncio.timeout(within):
        while True:
            found = await listing(base, headers)
            if {r["role"]: r["available"] for r in found["roles"]}[role] is available:
                return found
            await asyncio.sleep(0.2)
