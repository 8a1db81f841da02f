"""SQLite through `app.store.sqlite_hops`: one trip to aiosqlite's thread per statement, and nothing else
changed (rows, row counts, last row ids, errors, transactions)."""

from __future__ import annotations

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
