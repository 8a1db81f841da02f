"""SQLite statements in one trip to aiosqlite's thread, not four.

aiosqlite runs each sqlite3 call in its connection's thread, and SQLAlchemy's adapter makes one call per
step of a statement: make a cursor, execute, fetch the rows, close the cursor; and a pooled connection
given back is rolled back whether or not a transaction is open. Each call is a trip between the event loop
and that thread (a queue put, a wake-up, the loop woken back through its self-pipe, the GIL handed over
twice): about 18 of them per blocking `message/send` of an agent that answers at once, where a py-spy
profile of such sends found a fifth of the server's time holding the GIL.

`Connection` is aiosqlite's, with a `cursor()` whose `execute` makes the sqlite3 cursor, runs the statement,
reads its rows, description, rowcount and last row id, and closes it, all in one trip; reading the rows and
closing cost none. A rollback with no transaction open costs none either (`in_transaction` is a flag read
without the thread: the connection is checked out by one session, with no statement in flight). Everything
else (commit, the isolation level SQLAlchemy sets, close) is aiosqlite's own.

`use(engine)` makes an async SQLite engine connect this way (SQLAlchemy's `do_connect` event hands the
dialect's connect arguments to `connect` here instead of `aiosqlite.connect`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import aiosqlite
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

_Row = Any
_Description = tuple[tuple[Any, ...], ...] | None


class Cursor:
    """What SQLAlchemy's aiosqlite adapter uses of `aiosqlite.Cursor`, one trip per statement."""

    arraysize = 1

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._rows: list[_Row] = []
        self.description: _Description = None
        self.rowcount = -1
        self.lastrowid: int | None = None

    async def __aenter__(self) -> Cursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] | None = None) -> Cursor:
        raw = self._conn._conn
        self._take(await self._conn._execute(_run, raw, sql, () if parameters is None else parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any] | dict[str, Any]]) -> Cursor:
        raw = self._conn._conn
        self._take(await self._conn._execute(_run_many, raw, sql, parameters))
        return self

    def _take(self, done: tuple[_Description, list[_Row], int, int | None]) -> None:
        self.description, self._rows, self.rowcount, self.lastrowid = done

    async def fetchone(self) -> _Row | None:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[_Row]:
        size = self.arraysize if size is None else size
        out, self._rows = self._rows[:size], self._rows[size:]
        return out

    async def fetchall(self) -> list[_Row]:
        out, self._rows = self._rows, []
        return out

    async def close(self) -> None:
        self._rows = []


def _run(
    raw: sqlite3.Connection, sql: str, parameters: Sequence[Any] | dict[str, Any]
) -> tuple[_Description, list[_Row], int, int | None]:
    """In aiosqlite's thread: the whole statement, its cursor closed whatever happens."""
    cur = raw.cursor()
    try:
        cur.execute(sql, parameters)
        description = cur.description
        rows = cur.fetchall() if description else []
        return description, rows, cur.rowcount, cur.lastrowid
    finally:
        cur.close()


def _run_many(
    raw: sqlite3.Connection, sql: str, parameters: Iterable[Sequence[Any] | dict[str, Any]]
) -> tuple[_Description, list[_Row], int, int | None]:
    cur = raw.cursor()
    try:
        cur.executemany(sql, parameters)
        return cur.description, [], cur.rowcount, cur.lastrowid
    finally:
        cur.close()


def _run_batch(raw: sqlite3.Connection, statements: list[tuple[str, list[Sequence[Any]]]]) -> None:
    """In aiosqlite's thread: BEGIN, every statement, COMMIT; a ROLLBACK and SQLAlchemy's error on any
    failure (the statement and its parameters named, as its own execute names them)."""
    sql: str | None = None
    params: list[Sequence[Any]] = []
    try:
        if not raw.in_transaction:
            raw.execute("BEGIN")
        for sql, params in statements:
            raw.executemany(sql, params)
        raw.commit()
    except sqlite3.Error as exc:
        if raw.in_transaction:
            raw.rollback()
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


class Connection(aiosqlite.Connection):
    """aiosqlite's connection with one-trip cursors, one-trip batches and free rollbacks of nothing."""

    def cursor(self) -> Cursor:  # type: ignore[override]
        return Cursor(self)

    async def batch(self, statements: list[tuple[str, list[Sequence[Any]]]]) -> None:
        """Run `statements` (SQL and its parameter tuples, each an executemany) as one transaction, in
        one trip (`sqlite_steps`); the connection must have no transaction of SQLAlchemy's open."""
        await self._execute(_run_batch, self._conn, statements)

    async def rollback(self) -> None:
        if self._connection is not None and not self._connection.in_transaction:
            return
        await super().rollback()


def connect(database: str, **kwargs: Any) -> Connection:
    """`aiosqlite.connect`'s twin: the connection (awaited by SQLAlchemy), its thread a daemon's as
    SQLAlchemy makes aiosqlite's."""
    kwargs.pop("iter_chunk_size", None)
    conn = Connection(partial(sqlite3.connect, database, **kwargs), 64)
    conn._thread.daemon = True
    return conn


def use(engine: AsyncEngine) -> None:
    """Connect `engine` (async, SQLite) through `connect`."""

    @event.listens_for(engine.sync_engine, "do_connect")
    def _one_trip(_dialect: Any, _record: Any, _cargs: list[Any], cparams: dict[str, Any]) -> None:
        cparams["async_creator_fn"] = connect
