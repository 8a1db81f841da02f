"""tests/support/server.py's port ranges: two test runs on one machine (two clones' `make test`, each with
the same xdist worker names) never hand out ports from the same range. When they did, one run's soak picked
the port of the other's PostgreSQL, stopped for a moment by a fault, and the two soaks shared a database."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import server

HOLD = (
    "from tests.support import server; server.free_port(); print(server._claim_range(), flush=True); "
    "import sys; sys.stdin.read()"
)


def test_test_processes_with_the_same_worker_name_take_ranges_of_their_own() -> None:
    mine = server._claim_range()
    env = {**os.environ, "PYTEST_XDIST_WORKER": os.environ.get("PYTEST_XDIST_WORKER", "gw0")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD],
            cwd=server.ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        ranges = [int(p.stdout.readline()) for p in procs if p.stdout is not None]
    finally:
        for p in procs:
            p.communicate("", timeout=30)
    assert len(ranges) == 2
    assert len({mine, *ranges}) == 3, f"this process holds {mine}, the two others {ranges}"
    for k in ranges:
        low = server.PORTS_FROM + k * server.PORTS_PER_PROCESS
        assert server.PORTS_FROM <= low and low + server.PORTS_PER_PROCESS <= 32768
