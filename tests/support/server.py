"""A real server in a subprocess: `a2a-server migrate` then `a2a-server serve` on a free port."""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TextIO

import httpx

from scripts.ready import READY_TIMEOUT_S, start, tails

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

STOP_TIMEOUT_S = 60.0
"""How long a graceful exit may take (uvicorn's own grace is 5 s) before the process is killed."""

PORTS_FROM = 20000
PORTS_PER_PROCESS = 2000
"""Each test process (an xdist worker) hands out ports from a range of its own below the kernel's ephemeral
ports (32768 and up): two workers never pick the same port between choosing it and binding it, and neither
does the ephemeral port of an outgoing connection. A range is claimed with a lock held for the process's life
(`_claim_range`), so two test runs on one machine (two clones' `make test`) never share one either: a port
one run's fault test frees for a moment (a killed replica, a stopped PostgreSQL) is never picked by the other,
and the data folders named after ports (`own_services.py`) stay each run's own."""
RANGES = 6
LOCKS = Path(os.environ.get("A2A_TEST_PORT_LOCKS") or tempfile.gettempdir())
"""Where the ranges' lock files are: every test run on the machine looks in the same folder (a test of the
claims sets a folder of its own, so the runs beside it do not decide its outcome)."""
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_next = itertools.count(random.randrange(PORTS_PER_PROCESS))
_range: int | None = None
_range_lock: TextIO | None = None


def _claim_range() -> int:
    """The first port range no other process on this machine holds, this worker's own first; the lock file's
    descriptor stays open (and the range claimed) until the process exits. With every range held, the
    worker's own, shared as before."""
    global _range, _range_lock
    if _range is None:
        _range = _worker % RANGES
        for k in ((_worker + i) % RANGES for i in range(RANGES)):
            lock = open(LOCKS / f"a2a-test-ports-{k}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            _range, _range_lock = k, lock
            break
    return _range


def free_port() -> int:
    """A port nothing listens on now, from this process's range, each handed out once in turn."""
    low = PORTS_FROM + _claim_range() * PORTS_PER_PROCESS
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
        migrate(self.env)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of its log, for failure messages."""
        return tails([self.log_path], lines)

    def start(self) -> None:
        """Start it and wait until /readyz answers 200 (migrated, bus up, runners open); a process that exits
        or is not ready in time fails with its log tail and is not left running."""
        cmd = [str(BIN / "a2a-server"), "serve"]
        self.proc = start(cmd, self.base_url + "/readyz", "server", self.log_path, cwd=ROOT, env=self.env)

    def stop(self, must_be_graceful: bool = False) -> None:
        """SIGTERM and wait for the exit; SIGKILL after STOP_TIMEOUT_S. `must_be_graceful`: a test about
        what a graceful exit does fails on the kill, with the log tail, instead of asserting on what a kill
        left."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                if must_be_graceful:
                    raise RuntimeError(
                        f"server did not exit within {STOP_TIMEOUT_S:.0f}s of SIGTERM and was killed; "
                        f"{self.log_tail()}"
                    ) from None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


async def until_available(
    servers: Sequence[ServerProcess],
    roles: Collection[str],
    headers: dict[str, str] | None = None,
    within_s: float = READY_TIMEOUT_S,
) -> None:
    """Once the first server's discovery (`GET /agents`) lists every role of `roles` as available: ready
    does not mean registered (start-up waits for its first discovery write only so long). Fails with what
    was available and the servers' log tails."""
    available: set[str] = set()
    try:
        async with (
            httpx.AsyncClient(base_url=servers[0].base_url, headers=headers, timeout=30) as c,
            asyncio.timeout(within_s),
        ):
            while True:
                body = (await c.get("/agents")).json()
                available = {r["role"] for r in body["roles"] if r["available"]}
                if set(roles) <= available:
                    return
                await asyncio.sleep(0.1)
    except TimeoutError:
        tails = "\n".join(s.log_tail() for s in servers)
        raise AssertionError(f"roles available: {sorted(available)}, not {sorted(roles)}\n{tails}") from None


def migrate(env: dict[str, str]) -> None:
    """`a2a-server migrate` with `env`; a failure shows what it printed (check=True would drop it)."""
    done = subprocess.run(
        [str(BIN / "a2a-server"), "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"a2a-server migrate failed ({done.returncode}):\n{done.stdout}{done.stderr}"
