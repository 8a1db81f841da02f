"""The servers under test, each a subprocess: ours on PostgreSQL (at this checkout, or at an earlier commit
checked out beside it), ours on SQLite, a2a-sdk's reference server on PostgreSQL, the JS SDK's in memory."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg

from scripts.ready import start

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RPC_PATH = "/a2a/jsonrpc"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_children(pid: int) -> list[int]:
    """A process and its children (a supervisor's worker processes)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [pid, *(int(p) for p in children.read_text().split())] if children.exists() else [pid]


def _dsn(url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def create_database(base_url: str, prefix: str) -> str:
    """A new, empty database beside `base_url`'s; its SQLAlchemy URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(_dsn(base_url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base_url.rsplit("/", 1)[0] + "/" + name


async def drop_database(base_url: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(_dsn(base_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def task_states(url: str) -> dict[str, int]:
    """Stored tasks by status state: both servers keep a `tasks` table with a JSON `status`."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT status::jsonb->>'state' AS state, count(*) AS n FROM tasks GROUP BY 1"
        )
    finally:
        await conn.close()
    return {str(r["state"]): int(r["n"]) for r in rows}


class Server:
    """One server process on a free loopback port; `label` names it in the report."""

    postgres = True
    """Whether it keeps its tasks in its own PostgreSQL database (commits and stored tasks are counted)."""

    def __init__(self, label: str, database_url: str, log_path: Path) -> None:
        self.label = label
        self.database_url = database_url
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.rpc_url = self.base_url + RPC_PATH
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def cwd(self) -> Path:
        """Where it runs: this checkout."""
        return ROOT

    def prepare(self) -> None:
        """Anything to do before the first start (migrations)."""

    def start(self) -> None:
        """Start it and wait until /readyz answers 200 (scripts/ready.py)."""
        url = self.base_url + "/readyz"
        name = f"{self.label} server"
        self.proc = start(self.command(), url, name, self.log_path, cwd=self.cwd(), env=self.env())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def pids(self) -> list[int]:
        return [self.pid]

    @property
    def cpu_groups(self) -> dict[str, list[int]]:
        return {}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class OurServer(Server):
    """`a2a-server serve` with the echo agent: one process, one uvicorn worker, at the default LOG_LEVEL
    (`info`: an access line per request, as a user's server logs). Only the per-principal limits a single
    load client would trip are off."""

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "AGENT_ADAPTER": "echo",
            "AUTH_MODE": "off",
            "TASK_RATE_PER_MIN": "0",
            "MAX_STREAMS_PER_PRINCIPAL": "0",
            "GRPC_PORT": "0",
        }

    def command(self) -> list[str]:
        return [str(BIN / "a2a-server"), "serve"]

    def prepare(self) -> None:
        subprocess.run(
            [str(BIN / "a2a-server"), "migrate"], cwd=ROOT, env=self.env(), check=True, capture_output=True
        )


class QuietServer(OurServer):
    """Ours with no access line (`LOG_LEVEL=warning`): what the default level's logging costs, beside it."""

    def env(self) -> dict[str, str]:
        return {**super().env(), "LOG_LEVEL": "warning"}


class GranianServer(QuietServer):
    """Ours under granian instead of uvicorn (`bench/granian_app.py`), one process, uvloop, HTTP/1.1, no
    access line: beside `quiet`, the HTTP server's own cost (issue 39)."""

    def command(self) -> list[str]:
        return [
            str(BIN / "granian"),
            *("--interface", "asgi", "--factory", "--host", "127.0.0.1", "--port", str(self.port)),
            *("--workers", "1", "--loop", "uvloop", "--http", "1", "--no-ws", "--log-level", "warning"),
            "bench.granian_app:app",
        ]

    @property
    def pids(self) -> list[int]:
        """Granian's supervisor and its worker process: their CPU is the server's."""
        assert self.proc is not None
        return with_children(self.proc.pid)


class WorkersServer(OurServer):
    """Ours with `WORKERS` processes on one port (each its own replica, sharing PostgreSQL and Redis)."""

    def __init__(self, label: str, database_url: str, log_path: Path, workers: int, redis_url: str) -> None:
        super().__init__(label, database_url, log_path)
        self.workers = workers
        self.redis_url = redis_url

    def env(self) -> dict[str, str]:
        return {**super().env(), "WORKERS": str(self.workers), "REDIS_URL": self.redis_url}

    @property
    def pids(self) -> list[int]:
        """The supervisor and its workers: their CPU is the server's."""
        assert self.proc is not None
        return with_children(self.proc.pid)


class SqliteServer(OurServer):
    """Ours as `make run` serves it: SQLite in a file (`database_url` is its SQLAlchemy URL)."""

    postgres = False


class BaselineServer(OurServer):
    """Ours at an earlier commit, checked out in `checkout` and run with this virtualenv: a before/after
    comparison measured in the same run."""

    def __init__(self, label: str, database_url: str, log_path: Path, checkout: Path) -> None:
        super().__init__(label, database_url, log_path)
        self.checkout = checkout

    def env(self) -> dict[str, str]:
        return {**super().env(), "PYTHONPATH": str(self.checkout)}

    def cwd(self) -> Path:
        return self.checkout

    def command(self) -> list[str]:
        return [sys.executable, "-c", "from app.cli import main; main()", "serve"]

    def prepare(self) -> None:
        subprocess.run(
            [sys.executable, "-c", "from app.cli import main; main()", "migrate"],
            cwd=self.checkout,
            env=self.env(),
            check=True,
            capture_output=True,
        )


JS_DIR = ROOT / "bench" / "js"


class JsServer(Server):
    """The official JS SDK's server (`@a2a-js/sdk` + express, bench/js/server.mjs), everything in memory."""

    postgres = False

    def command(self) -> list[str]:
        return ["node", str(JS_DIR / "server.mjs"), str(self.port)]

    def prepare(self) -> None:
        """The pinned packages (bench/js/package-lock.json), installed once."""
        if shutil.which("node") is None:
            raise RuntimeError(
                "node is not installed (the coding-agent CLIs need it too: scripts/install-clis.sh)"
            )
        if not (JS_DIR / "node_modules" / "@a2a-js" / "sdk").is_dir():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_DIR, check=True
            )


class ReferenceServer(Server):
    """a2a-sdk's DefaultRequestHandler + DatabaseTaskStore (bench/reference_server.py), one worker."""

    cluster = False

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench.reference_server",
            "--database-url",
            self.database_url,
            "--port",
            str(self.port),
            *(["--cluster"] if self.cluster else []),
        ]


class ReferenceClusterServer(ReferenceServer):
    """One replica of a2a-sdk's cluster mode (versioned store + polled `task_events`), one worker."""

    cluster = True


async def commit_count(url: str) -> int:
    """Transactions committed in `url`'s database so far (PostgreSQL's statistics lag by about 1 s)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        return int(
            await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        )
    finally:
        await conn.close()
