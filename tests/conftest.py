"""Fixtures: a real server process per database backend (SQLite and PostgreSQL), and clients for it."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import parallel
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.receiver import Receiver
from tests.support.server import ServerProcess, migrate

BACKENDS = ["sqlite", "postgres"]

TESTS = Path(__file__).resolve().parent
KINDS = ("e2e", "cluster", "interop", "cli", "console")
"""Process-level suites: each is a folder of tests/ and a marker (pyproject.toml) of the same name."""


def pytest_configure(config: pytest.Config) -> None:
    parallel.configure()  # an xdist worker but the first: a Redis of its own (tests/support/parallel.py)


def pytest_unconfigure(config: pytest.Config) -> None:
    parallel.unconfigure()


@pytest.hookimpl(wrapper=True)  # the order after pytest's own (which groups tests by parametrized fixture)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Mark every test by its folder, so nobody has to remember to: tests/e2e/... is `e2e`, and so on for
    each of KINDS; the room folders (tests/tasks/, tests/store/, ...) are `unit`, but for a test there that
    carries a kind marker itself (one that starts a server process is `@pytest.mark.e2e`). In an xdist
    worker, the cluster tests first (tests/support/parallel.py)."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        if folder in KINDS:
            item.add_marker(folder)
        elif not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker("unit")
    yield
    parallel.serial_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return parallel.make_scheduler(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Last: no log the run wrote (servers, replicas, workers, nginx: every `*.log` under the run's temporary
    folder) shows a secret the tests handed out (tests/support/secrets.py); a leak fails the run. An xdist
    worker scans its own folder (the secrets it handed out are known there) and hands what it found to the
    controller, which reports it (`pytest_testnodedown`)."""
    from tests.support.secrets import leaks

    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)  # None: no test made a temporary folder
    found = leaks(basetemp) if basetemp is not None else []
    lines = [f"  {path}: {secret[:6]}..." for path, secret in found]
    if parallel.worker() is not None:
        session.config.workeroutput["secret_leaks"] = lines  # type: ignore[attr-defined]
        return
    lines += parallel.worker_leaks
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "a secret the tests handed out was logged:\n" + "\n".join(lines)
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "secrets in logs", red=True)
        reporter.write_line(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller, as a worker ends: keep the leaks it found."""
    parallel.worker_leaks.extend(getattr(node, "workeroutput", {}).get("secret_leaks", []))


async def _fresh_pg_database(base_url: str, template: str | None = None) -> str:
    """A new database on the test PostgreSQL (a copy of `template` when given, else empty); its URL."""
    name = f"a2a_{uuid.uuid4().hex[:12]}"
    dsn = base_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    finally:
        await conn.close()
    return base_url.rsplit("/", 1)[0] + "/" + name


def _migrate(url: str) -> None:
    migrate({**os.environ, "DATABASE_URL": url})


_TEMPLATES: dict[str, str] = {}
"""Per backend (and PostgreSQL server), a database this process migrated to head once with `a2a-server
migrate`: `migrated_database_url` hands out copies of it instead of running the migrations again for every
server and cluster. What the migrations build is tested on fresh databases in
tests/store/test_migrations.py; the tests on a PostgreSQL of their own (`own_services`) and the upgrade check
still migrate theirs."""
_TEMPLATE_DIR = Path(tempfile.mkdtemp(prefix="a2a-template-"))
atexit.register(shutil.rmtree, _TEMPLATE_DIR, True)


async def database_url(backend: str, tmp: Path) -> str:
    """A new, empty database of `backend` (SQLite under `tmp`); skipped without TEST_POSTGRES_URL."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / 'a2a.db'}"
    pg = os.environ.get("TEST_POSTGRES_URL")
    if not pg:
        pytest.skip("TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    return await _fresh_pg_database(pg)


async def migrated_pg_database(base_url: str) -> str:
    """A new database on the PostgreSQL of `base_url`, already at the migrations' head (a copy of this
    process's template, made on first use)."""
    template = _TEMPLATES.get(base_url)
    if template is None:
        url = await _fresh_pg_database(base_url)
        _migrate(url)  # nobody connects to it afterwards: CREATE DATABASE ... TEMPLATE needs it idle
        template = _TEMPLATES[base_url] = url.rsplit("/", 1)[1]
    return await _fresh_pg_database(base_url, template)


async def migrated_database_url(backend: str, tmp: Path) -> str:
    """`database_url`, already at the migrations' head: what `a2a-server migrate` would leave, copied from a
    template migrated once per test process."""
    if backend == "sqlite":
        template = _TEMPLATES.get("sqlite")
        if template is None:
            path = _TEMPLATE_DIR / "a2a.db"
            _migrate(f"sqlite+aiosqlite:///{path}")
            template = _TEMPLATES["sqlite"] = str(path)
        tmp.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal"):  # the migration closed its connection: no -wal is left, normally
            if Path(template + suffix).exists():
                shutil.copyfile(template + suffix, tmp / f"a2a.db{suffix}")
        return f"sqlite+aiosqlite:///{tmp / 'a2a.db'}"
    pg = os.environ.get("TEST_POSTGRES_URL")
    if not pg:
        pytest.skip("TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    return await migrated_pg_database(pg)


async def make_server(backend: str, tmp: Path, **env: str) -> ServerProcess:
    """A started server on a new database of `backend` at the migrations' head."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(await migrated_database_url(backend, tmp), tmp / "server.log", **env)
    server.start()
    return server


@pytest.fixture(scope="session", params=BACKENDS)
async def server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server shared by the tests of one backend, running the scripted test agent."""
    srv = await make_server(request.param, tmp_path_factory.mktemp(f"server-{request.param}"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback shared by a module's tests (each reads the calls to its own paths)."""
    rec = Receiver()
    yield rec
    rec.close()


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
        c = Cluster(await migrated_pg_database(pg), redis, workdir, replicas, migrated=True, **env)
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
