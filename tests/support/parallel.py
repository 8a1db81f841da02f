"""Running the suite in several pytest-xdist workers (`make test` runs `pytest -n 4`, docs/testing.md).

What the workers must not share, and how they don't:

- PostgreSQL: nothing to do; every server, cluster and in-process store gets a database of its own (a copy of
  the worker's own migrated template, tests/conftest.py).
- Redis: pub/sub is server-wide (every database number sees every channel, and replicas are named `a2a-1`,
  `a2a-2`, ... in every cluster), and some tests restart the Redis of `TEST_REDIS_URL`. The first worker
  (`gw0`) uses `TEST_REDIS_URL`; every other worker starts a Redis of its own on a free port
  (scripts/redis.sh) and points `TEST_REDIS_URL` at it; it is stopped when the worker ends.
- Machine time: the tests that start clusters of three replicas behind nginx or stop and restart PostgreSQL or
  Redis (tests/cluster/, and tests/console/test_console_cluster.py) form two groups, `cluster` and
  `cluster-2` (`SECOND_FILES`), of about equal time: each runs one test after another in one worker, and both
  start first (together they take the longest, about 19 minutes; the halves run side by side). Every other
  test file is a group of its own, so a module's servers and browser pages start once, in one worker. The
  groups are given to xdist by a scheduler of ours (`make_scheduler`, tests/conftest.py's
  `pytest_xdist_make_scheduler`: pytest 9.2 gives an item's node id no `_nodeid` any more, which xdist's own
  `--dist loadgroup` renames to group), used by every distributing mode but `--dist each`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import free_port

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SERIAL = "cluster"
"""The xdist group of the tests that start clusters or take PostgreSQL or Redis away."""
SERIAL_PREFIXES = ("tests/cluster/", "tests/console/test_console_cluster.py")
"""Its tests, by node id (relative to the checkout)."""
SECOND = "cluster-2"
"""The other half of those tests, in a worker of its own beside `cluster` (each worker has its own Redis)."""
SECOND_FILES = (
    "tests/cluster/test_chaos_leases.py",
    "tests/cluster/test_remote_worker.py",
    "tests/cluster/test_cluster_chaos.py",
    "tests/cluster/test_sessions_survive.py",
    "tests/cluster/test_db_recovery.py",
    "tests/console/test_console_cluster.py",
    "tests/cluster/test_pools.py",
    "tests/cluster/test_prometheus.py",
    "tests/cluster/test_push_cluster.py",
    "tests/cluster/test_worker_repository.py",
    "tests/cluster/test_workers.py",
    "tests/cluster/test_mcp_cluster.py",
    "tests/cluster/test_grpc_cluster.py",
)
"""Chosen by measured time (a JUnit report of a whole run): each half takes about 9.5 minutes."""


def worker() -> str | None:
    """This process's xdist worker id (`gw0`, `gw1`, ...), None when not running as a worker."""
    return os.environ.get("PYTEST_XDIST_WORKER")


class WorkerRedis:
    """A Redis of this worker alone, on a free port; its files under /tmp/a2a-redis-<port> (the place
    scripts/redis.sh keeps them, so a test's `restart_redis()` finds it)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._env = {**os.environ, "REDIS_PORT": str(self.port)}

    def _run(self, action: str) -> None:
        done = subprocess.run(
            [str(SCRIPTS / "redis.sh"), action], env=self._env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/redis.sh {action} (port {self.port}) failed:\n{done.stderr}")

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")
        shutil.rmtree(f"/tmp/a2a-redis-{self.port}", ignore_errors=True)


_own_redis: WorkerRedis | None = None

worker_leaks: list[str] = []
"""In the controller: the secrets the workers found in their logs (tests/conftest.py's
`pytest_sessionfinish`)."""


def configure() -> None:
    """In a worker other than the first, with TEST_REDIS_URL set: start this worker's Redis and use it."""
    global _own_redis
    name = worker()
    if name is None or name == "gw0" or not os.environ.get("TEST_REDIS_URL"):
        return
    _own_redis = WorkerRedis()
    _own_redis.start()
    os.environ["TEST_REDIS_URL"] = _own_redis.url


def unconfigure() -> None:
    global _own_redis
    if _own_redis is not None:
        _own_redis.stop()
        _own_redis = None


def group(nodeid: str) -> str:
    """The group of a test, by its node id: `cluster` or `cluster-2` (one worker each, one at a time), else
    its file."""
    path = nodeid.split("::", 1)[0]
    if path in SECOND_FILES:
        return SECOND
    if path.startswith(SERIAL_PREFIXES):
        return SERIAL
    return path


def serial_first(items: list[pytest.Item]) -> None:
    """In a worker: the two cluster groups first in the collection (the order work is handed out in), so the
    longest groups start at once."""
    if worker() is None:
        return
    # stable: the rest keeps its order
    items.sort(key=lambda item: group(item.nodeid) not in (SERIAL, SECOND))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by groups (`--dist loadscope`'s, with `group` as the scope), handing the groups out
    in collection order (not the largest first), for every distributing mode but `each`."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group(nodeid)

    if config.getvalue("dist") in ("no", "each"):
        return None
    config.option.loadscopereorder = False
    return GroupScheduling(config, log)
