"""A PostgreSQL and a Redis of one test alone, on free ports, so the test may stop and restart them.

The shared instances (TEST_POSTGRES_URL, TEST_REDIS_URL) serve every other test at once and must never be
stopped; a test that takes a service away starts its own here (scripts/pg.sh with PG_PORT/PG_DATA,
scripts/redis.sh with REDIS_PORT/REDIS_DIR) and removes it afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.server import free_port

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


class OwnServices:
    """`start()`, `stop()`; `stop_pg()`/`start_pg()`, `start_redis()`/`restart_redis()`/`stop_redis()`;
    `pg_url`, `redis_url`."""

    def __init__(self) -> None:
        self.pg_port = free_port()
        self.redis_port = free_port()
        # Under /tmp itself: the postgres user must reach the data directory (pytest's are private).
        self.pg_data = Path(f"/tmp/a2a-outage-pg-{self.pg_port}")
        self.redis_dir = Path(f"/tmp/a2a-outage-redis-{self.redis_port}")
        self._pg_env = {
            **os.environ,
            "PG_PORT": str(self.pg_port),
            "PG_DATA": str(self.pg_data),
            "PG_DB": "a2a_outage",
        }
        self._redis_env = {**os.environ, "REDIS_PORT": str(self.redis_port), "REDIS_DIR": str(self.redis_dir)}

    @property
    def pg_url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.pg_port}/a2a_outage"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def _run(self, script: str, action: str, env: dict[str, str]) -> None:
        done = subprocess.run([str(SCRIPTS / script), action], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/{script} {action} failed:\n{done.stdout}{done.stderr}")

    def start_pg(self) -> None:
        self._run("pg.sh", "start", self._pg_env)

    def stop_pg(self) -> None:
        """A fast shutdown: open transactions are aborted and every connection is closed."""
        self._run("pg.sh", "stop", self._pg_env)

    def start_redis(self) -> None:
        self._run("redis.sh", "start", self._redis_env)

    def stop_redis(self) -> None:
        self._run("redis.sh", "stop", self._redis_env)
        shutil.rmtree(self.redis_dir, ignore_errors=True)

    def restart_redis(self) -> None:
        """Stop Redis and start a new, empty process."""
        self._run("redis.sh", "restart", self._redis_env)

    def start(self) -> None:
        self.start_pg()
        self.start_redis()

    def stop(self) -> None:
        for script, env in (("pg.sh", self._pg_env), ("redis.sh", self._redis_env)):
            try:
                self._run(script, "stop", env)
            except RuntimeError:
                pass
        shutil.rmtree(self.pg_data, ignore_errors=True)
        shutil.rmtree(self.redis_dir, ignore_errors=True)
