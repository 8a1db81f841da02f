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


def test_test_processes_with_the_same_worker_name_take_ranges_of_their_own(tmp_path) -> None:
    """Three processes named as one xdist worker, with a lock folder of their own (the ranges other test
    runs on this machine hold do not count): three ranges, each within the ports below the ephemeral ones."""
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw1", "A2A_TEST_PORT_LOCKS": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD],
            cwd=server.ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        ranges = [int(p.stdout.readline()) for p in procs if p.stdout is not None]
    finally:
        for p in procs:
            p.communicate("", timeout=30)
    assert sorted(ranges) == [1, 2, 3], f"the worker's own range first, then the next free: {ranges}"
    for k in ranges:
        low = server.PORTS_FROM + k * server.PORTS_PER_PROCESS
        assert server.PORTS_FROM <= low and low + server.PORTS_PER_PROCESS <= 32768
