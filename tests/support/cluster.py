"""A real cluster in subprocesses for tests: N replicas on free ports behind nginx (scripts/cluster.py).

`Cluster(database_url, redis_url, tmp_path, replicas=3, grpc=False, **env)` runs the scripted test agent with
short keep-alives; `env` overrides any replica setting (LEASE_TTL_S, MAX_CONCURRENT_TASKS, ...); `grpc=True`
gives each replica a gRPC port and nginx a gRPC server (`cluster.grpc_port`) the card advertises. Logs:
`tmp_path/replica-<n>.log` and `tmp_path/nginx/`. Every wait polls a condition (/readyz), never a fixed sleep.
`prometheus=True` adds Prometheus scraping every replica every second (`cluster.prometheus_url`).
`migrated=True`: the database is at the migrations' head already, `start()` does not migrate it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import scripts.cluster
from scripts.cluster import REDIS_BUS, Cluster as _Cluster, Replica
from tests.support.server import STOP_TIMEOUT_S, free_port

# The clusters tests start take their ports from this test process's own range, as its servers do.
scripts.cluster.free_port = free_port

__all__ = ["REDIS_BUS", "Cluster", "Replica"]

TEST_ENV = {
    "AGENT_ADAPTER": "scripted",
    "LOG_LEVEL": "warning",
    "SSE_KEEPALIVE_S": "1",
    "AUTH_MODE": "off",
    "TASK_RATE_PER_MIN": "0",
    "MAX_STREAMS_PER_PRINCIPAL": "0",
}


class Cluster(_Cluster):
    """Replicas + nginx on loopback with test defaults; `start()`, `stop()`, `kill(i)`, `restart(i)`,
    `terminate(i)`, `spawn(i)`, `pause(i)`/`resume(i)`, `restart_redis()`, `nginx_url`, `urls`,
    `replicas[i].log_path`."""

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        tmp_path: Path,
        replicas: int = 3,
        *,
        redis_bus: bool | None = None,
        grpc: bool = False,
        prometheus: bool = False,
        migrated: bool = False,
        **env: str,
    ) -> None:
        self.migrated = migrated
        """The database is at the migrations' head already (a copy of a migrated template,
        tests/conftest.py): `start()` skips `a2a-server migrate`."""
        super().__init__(
            database_url,
            redis_url,
            tmp_path,
            replicas,
            redis_bus=redis_bus,
            env={**TEST_ENV, **env},
            grpc=grpc,
            prometheus=prometheus,
            scrape_interval="1s",
        )
        self.stop_timeout_s = STOP_TIMEOUT_S

    def migrate(self) -> None:
        if not self.migrated:
            super().migrate()

    def log(self, i: int) -> str:
        """Everything replica `i` has logged so far."""
        return self.replicas[i].log_path.read_text(errors="replace")

    def spawn(self, i: int) -> None:
        """Start replica `i` (on its old port) without waiting for it to be ready."""
        self._spawn(self.replicas[i])

    def pause(self, i: int) -> None:
        """SIGSTOP replica `i`: frozen, its sockets open, as a process the machine stopped scheduling."""
        os.kill(self._pid(i), signal.SIGSTOP)

    def resume(self, i: int) -> None:
        """SIGCONT replica `i` after `pause`."""
        os.kill(self._pid(i), signal.SIGCONT)

    def _pid(self, i: int) -> int:
        r = self.replicas[i]
        if r.pid is None or not r.alive():
            raise RuntimeError(f"replica {r.replica_id} is not running")
        return r.pid
