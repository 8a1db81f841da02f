"""Fixtures: a real server process per database backend (SQLite and PostgreSQL), and clients for it."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.server import ServerProcess

BACKENDS = ["sqlite", "postgres"]

TESTS = Path(__file__).resolve().parent
KINDS = ("e2e", "cluster", "interop", "cli", "console")
"""Process-level suites: each is a folder of tests/ and a marker (pyproject.toml) of the same name."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by its folder, so nobody has to remember to: tests/e2e/... is `e2e`, and so on for
    each of KINDS; the room folders (tests/tasks/, tests/store/, ...) are `unit`, but for a test there that
    carries a kind marker itself (one that starts a server process is `@pytest.mark.e2e`)."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        if folder in KINDS:
            item.add_marker(folder)
        elif not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker("unit")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Last: no log the run wrote (servers, replicas, workers, nginx: every `*.log` under the run's temporary
    folder) shows a secret the tests handed out (tests/support/secrets.py); a leak fails the run."""
    from tests.support.secrets import leaks

    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)  # None: no test made a temporary folder
    if basetemp is None:
        return
    found = leaks(basetemp)
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"  {path}: {secret[:6]}..." for path, secret in found]
    message = "a secret the tests handed out was logged:\n" + "\n".join(lines)
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "secrets in logs", red=True)
        reporter.write_line(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


async def _fresh_pg_database(base_url: str) -> str:
    """A new, empty database on the test PostgreSQL; its URL."""
    name = f"a2a_{uuid.uuid4().hex[:12]}"
    dsn = base_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base_url.rsplit("/", 1)[0] + "/" + name


async def database_url(backend: str, tmp: Path) -> str:
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / 'a2a.db'}"
    pg = os.environ.get("TEST_POSTGRES_URL")
    if not pg:
        pytest.skip("TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    return await _fresh_pg_database(pg)


async def make_server(backend: str, tmp: Path, **env: str) -> ServerProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(await database_url(backend, tmp), tmp / "server.log", **env)
    server.migrate()
    server.start()
    return server


@pytest.fixture(scope="session", params=BACKENDS)
async def server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server shared by the tests of one backend, running the scripted test agent."""
    srv = await make_server(request.param, tmp_path_factory.mktemp(f"server-{request.param}"))
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        yield c


ClusterFactory = Callable[..., Awaitable[Cluster]]


@pytest.fixture
async def cluster_factory(tmp_path: Path) -> AsyncIterator[ClusterFactory]:
    """Start clusters (replicas behind nginx) on fresh PostgreSQL databases and the test Redis.

    `await cluster_factory(replicas=3, **env)`; every cluster started is stopped after the test. PostgreSQL
    only: skipped without TEST_POSTGRES_URL or TEST_REDIS_URL (`make test` sets both).
    """
    pg = os.environ.get("TEST_POSTGRES_URL")
    redis = os.environ.get("TEST_REDIS_URL")
    if not pg:
        pytest.skip("TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    if not redis:
        pytest.skip("TEST_REDIS_URL is not set: `make test` starts Redis (scripts/redis.sh) and sets it")
    started: list[Cluster] = []

    async def make(replicas: int = 3, **env: str) -> Cluster:
        workdir = tmp_path / f"cluster-{len(started) + 1}"
        c = Cluster(await _fresh_pg_database(pg), redis, workdir, replicas, **env)
        started.append(c)
        await asyncio.to_thread(c.start)
        return c

    yield make
    for c in started:
        await asyncio.to_thread(c.stop)


@pytest.fixture
async def own_services() -> AsyncIterator[OwnServices]:
    """A PostgreSQL and a Redis of this test alone (free ports), for tests that stop or restart them:
    the shared ones serve every other test and are never touched."""
    own = OwnServices()
    await asyncio.to_thread(own.start)
    try:
        yield own
    finally:
        await asyncio.to_thread(own.stop)


@pytest.fixture
async def cluster(cluster_factory: ClusterFactory) -> Cluster:
    """Three replicas behind nginx (scripted agent), on a fresh PostgreSQL database and the test Redis."""
    return await cluster_factory()


@pytest.fixture(scope="session", params=BACKENDS)
async def auth_server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server that admits alice and bob by API key (tests/support/auth.py), with an extended card
    configured."""
    from tests.support.auth import api_keys_env

    skills = '[{"id": "admin", "name": "Admin", "description": "Only for signed-in callers", "tags": ["x"]}]'
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"auth-{request.param}"),
        **api_keys_env(EXTENDED_CARD_SKILLS=skills),
    )
    yield srv
    srv.stop()
