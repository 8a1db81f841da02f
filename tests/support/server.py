"""A real server in a subprocess: `a2a-server migrate` then `a2a-server serve` on a free port."""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


PORTS_FROM = 20000
PORTS_PER_PROCESS = 2000
"""Each test process (an xdist worker) hands out ports from a range of its own below the kernel's ephemeral
ports (32768 and up): two workers never pick the same port between choosing it and binding it, and neither
does the ephemeral port of an outgoing connection."""
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 6
_next = itertools.count(random.randrange(PORTS_PER_PROCESS))


def free_port() -> int:
    """A port nothing listens on now, from this process's range, each handed out once in turn."""
    low = PORTS_FROM + _worker * PORTS_PER_PROCESS
    for _ in range(PORTS_PER_PROCESS):
        port = low + next(_next) % PORTS_PER_PROCESS
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {low}-{low + PORTS_PER_PROCESS - 1}")


class ServerProcess:
    """One server process; `restart()` keeps the database, `kill()` ends it without a goodbye."""

    def __init__(self, database_url: str, log_path: Path, **env: str) -> None:
        self.database_url = database_url
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PORT": str(self.port),
            "HOST": "127.0.0.1",
            "AGENT_ADAPTER": "scripted",
            "LOG_LEVEL": "warning",
            "SSE_KEEPALIVE_S": "1",
            # Explicitly anonymous and unlimited unless a test configures credentials or limits.
            "AUTH_MODE": "off",
            "TASK_RATE_PER_MIN": "0",
            "MAX_STREAMS_PER_PRINCIPAL": "0",
            # No gRPC unless a test asks for it (GRPC_PORT=free_port()): many servers share this machine.
            "GRPC_PORT": "0",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def migrate(self) -> None:
        subprocess.run(
            [str(BIN / "a2a-server"), "migrate"],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "a2a-server"), "serve"], cwd=ROOT, env=self.env, stdout=log, stderr=log
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: see {self.log_path}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not become ready: see {self.log_path}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()
