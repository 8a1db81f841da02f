"""`outage.is_unavailable` on asyncpg's own errors, raised by real faults: the writer's one-statement path
(`store.steps`) runs on the driver connection, so a lost connection reaches the writer and the run's retry
as asyncpg raises it, not wrapped by SQLAlchemy. An outage must read as one (retried, no traceback); a bad
statement must not."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc

from app.store.outage import is_contention, is_unavailable


def _dsn() -> str:
    url = os.environ.get("TEST_POSTGRES_URL")
    if not url:
        pytest.skip("TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture
async def pg() -> AsyncIterator[asyncpg.Connection]:
    """An administrator's connection: it ends the others' server sides."""
    conn = await asyncpg.connect(_dsn())
    yield conn
    await conn.close()


async def _raised(call: asyncio.Future[object]) -> BaseException:
    with pytest.raises(Exception) as info:
        await call
    return info.value


async def _terminate(admin: asyncpg.Connection, victim: asyncpg.Connection) -> None:
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", victim.get_server_pid())


async def test_a_connection_whose_server_side_ended_is_an_outage(pg):
    victim = await asyncpg.connect(_dsn())
    await _terminate(pg, victim)
    await asyncio.sleep(0.2)  # the server's goodbye reaches the driver: the connection is closed
    exc = await _raised(asyncio.ensure_future(victim.execute("SELECT 1")))
    assert is_unavailable(exc), repr(exc)


async def test_a_statement_cut_off_by_the_server_is_an_outage(pg):
    victim = await asyncpg.connect(_dsn())
    try:
        running = asyncio.ensure_future(victim.execute("SELECT pg_sleep(30)"))
        await asyncio.sleep(0.2)
        await _terminate(pg, victim)
        exc = await _raised(running)
        assert is_unavailable(exc), repr(exc)
    finally:
        victim.terminate()


async def test_a_bad_statement_or_bad_arguments_are_not_an_outage(pg):
    exc = await _raised(asyncio.ensure_future(pg.execute("SELECT * FROM no_such_table")))
    assert isinstance(exc, asyncpg.UndefinedTableError)
    assert not is_unavailable(exc)
    exc = await _raised(asyncio.ensure_future(pg.execute("SELECT $1::int", "not a number")))
    assert not is_unavailable(exc), repr(exc)


@pytest.mark.parametrize(
    "error",
    [asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CannotConnectNowError],
    ids=["57P01-admin-shutdown", "57P03-cannot-connect-now"],
)
def test_class_57_is_an_outage_bare_and_wrapped_by_sqlalchemy(error: type[asyncpg.PostgresError]) -> None:
    """Operator intervention (a restart, a server starting up or shutting down) as asyncpg raises it on the
    writer's one-statement path, and as SQLAlchemy wraps it everywhere else (the dialect's error, whose
    `sqlstate` is the server's): both are outages, waited out rather than logged as bugs."""
    bare = error("the database system is shutting down")
    assert bare.sqlstate.startswith("57")
    assert is_unavailable(bare)

    class DialectError(Exception):
        sqlstate = bare.sqlstate

    for wrapper in (sa_exc.DBAPIError, sa_exc.InternalError, sa_exc.ProgrammingError):
        assert is_unavailable(wrapper("SELECT 1", {}, DialectError("shutting down"))), wrapper
    not_57 = type("DialectError", (Exception,), {"sqlstate": "42P01"})  # undefined table: a bug
    assert not is_unavailable(sa_exc.ProgrammingError("SELECT 1", {}, not_57("no table")))


@pytest.mark.parametrize(
    "error",
    [asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError],
    ids=["40P01-deadlock", "40001-serialization"],
)
def test_a_deadlock_is_contention_bare_and_wrapped_not_an_outage(error: type[asyncpg.PostgresError]) -> None:
    """A transaction PostgreSQL aborted for another one's sake is tried again by the writer, on either path
    (asyncpg's own error on the one-statement path; SQLAlchemy's, with the driver's error as its cause,
    in a transaction); it is neither an outage nor any other failed statement."""
    bare = error("deadlock detected")
    assert is_contention(bare) and not is_unavailable(bare)
    adapted = RuntimeError("deadlock detected")
    adapted.__cause__ = bare
    assert is_contention(sa_exc.DBAPIError("UPDATE tasks", {}, adapted))
    assert not is_contention(asyncpg.exceptions.UniqueViolationError("taken"))
    assert not is_contention(sa_exc.DBAPIError("UPDATE tasks", {}, RuntimeError("other")))
