"""SQLite through `app.store.sqlite_hops`: one trip to aiosqlite's thread per statement, and nothing else
changed (rows, row counts, last row ids, errors, transactions)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.store import sqlite_hops
from app.store.db import create_engine


@pytest.fixture
async def engine(tmp_path):
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL)"))
    yield engine
    await engine.dispose()


async def test_the_engine_connects_through_one_trip_connections(engine):
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert isinstance(raw.driver_connection, sqlite_hops.Connection)


async def test_a_statement_is_one_trip_and_a_read_gives_back_its_connection_for_free(engine, trips):
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT 1 AS one, 'x' AS two"))).all()
    assert [tuple(r) for r in rows] == [(1, "x")]
    assert trips == ["_run"], "one trip to execute and read; none to close, none to roll back nothing"


async def test_writes_commit_and_report_rowcount_and_lastrowid(engine, trips):
    async with engine.begin() as conn:
        first = await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
        assert first.lastrowid == 1
        many = await conn.execute(text("INSERT INTO t (name) VALUES (:n)"), [{"n": "b"}, {"n": "c"}])
        assert many.rowcount == 2
        changed = await conn.execute(text("UPDATE t SET name = name || '!' WHERE id > 1"))
        assert changed.rowcount == 2
    assert trips == ["_run", "_run_many", "_run", "commit"]
    async with engine.connect() as conn:
        names = (await conn.execute(text("SELECT name FROM t ORDER BY id"))).scalars().all()
    assert names == ["a", "b!", "c!"]


async def test_a_rolled_back_transaction_leaves_nothing(engine, trips):
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO t (name) VALUES ('gone')"))
        await conn.rollback()
    assert trips == ["_run", "rollback"], "a transaction open: the rollback is made"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 0


async def test_a_failing_statement_raises_sqlalchemys_error_and_the_connection_goes_on(engine):
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
    with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: t\.name"):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (name) VALUES ('b')"))
            await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
    async with engine.connect() as conn:
        names = (await conn.execute(text("SELECT name FROM t"))).scalars().all()
    assert names == ["a"], "the failed transaction's first insert was rolled back"


async def test_many_rows_come_back_whole_and_in_order(engine):
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (name) VALUES (:n)"), [{"n": f"n{i:04d}"} for i in range(500)])
    async with engine.connect() as conn:
        result = await conn.execute(text("SELECT name FROM t ORDER BY id"))
        first = result.fetchmany(3)
        rest = result.fetchall()
    assert [r[0] for r in first] == ["n0000", "n0001", "n0002"]
    assert len(rest) == 497 and rest[-1][0] == "n0499"


async def until(condition) -> None:
    async with asyncio.timeout(60):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_second_writer_waits_for_the_gate_not_in_sqlites_busy_handler(engine, trips):
    """While one connection's write transaction is open, another's write waits in asyncio (its statement
    not sent to SQLite at all) and goes once the first commits; a read never waits."""
    async with engine.connect() as a, engine.connect() as b, engine.connect() as reader:
        raw_a, raw_b = await a.get_raw_connection(), await b.get_raw_connection()
        gate = raw_a.driver_connection.gate
        assert gate is raw_b.driver_connection.gate is not None
        await a.execute(text("INSERT INTO t (name) VALUES ('a')"))

        async def write_b() -> None:
            await b.execute(text("INSERT INTO t (name) VALUES ('b')"))
            await b.commit()

        second = asyncio.create_task(write_b())
        await until(lambda: gate.waiting == 1)  # b waits for the gate
        sent = len(trips)
        assert (await reader.execute(text("SELECT count(*) FROM t"))).scalar() == 0  # a read goes on
        assert len(trips) == sent + 1 and not second.done()
        await a.commit()
        await second
        assert gate.waiting == 0 and gate.passed == 0
    async with engine.connect() as conn:
        assert [r[0] for r in await conn.execute(text("SELECT name FROM t ORDER BY id"))] == ["a", "b"]


async def test_a_gate_held_too_long_is_passed_and_sqlite_decides(engine, monkeypatch):
    """A transaction left open past GATE_WAIT_S does not hold the others on the gate: they go on to SQLite's
    busy handler (busy_timeout), as without the gate."""
    monkeypatch.setattr(sqlite_hops, "GATE_WAIT_S", 0.1)
    async with engine.connect() as a, engine.connect() as b:
        gate = (await a.get_raw_connection()).driver_connection.gate
        await a.execute(text("INSERT INTO t (name) VALUES ('a')"))

        async def write_b() -> None:
            await b.execute(text("INSERT INTO t (name) VALUES ('b')"))
            await b.commit()

        second = asyncio.create_task(write_b())
        await until(lambda: gate.passed == 1)  # b went on to the busy handler
        await a.commit()
        await second
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 2


async def test_a_rolled_back_or_closed_transaction_gives_the_gate_back(engine):
    async with engine.connect() as a:
        gate = (await a.get_raw_connection()).driver_connection.gate
        await a.execute(text("INSERT INTO t (name) VALUES ('a')"))
        await a.rollback()
        await a.execute(text("INSERT INTO t (name) VALUES ('a2')"))
    # closed with its transaction open: the pool rolled it back
    async with engine.connect() as b:
        await b.execute(text("INSERT INTO t (name) VALUES ('b')"))
        await b.commit()
        assert gate.waiting == 0 and gate.passed == 0
        assert [r[0] for r in await b.execute(text("SELECT name FROM t"))] == ["b"]
