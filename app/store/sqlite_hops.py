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
else (commit, the isolation level SQLAlchemy sets, close) is aiosqlite's own, but for the gate below.

One writer at a time (`WriteGate`, one per engine): SQLite lets one connection write at once, and a second
writer's statement sleeps in SQLite's busy handler, in steps of up to 100 ms, however soon the first
commits. The group commit's flusher meeting a lease renewal, a heartbeat or a webhook claim there holds
every waiting send's answer (the suspect for the half-second p99 some runs of 64 concurrent sends showed;
with the gate, five rounds gave 86-98 ms and one 140, without it 80-112: bench/README.md). So a statement
that starts a write transaction waits for the gate first (in asyncio, woken as soon as the gate is free, in
turn), and gives it back when its transaction ends (commit, rollback, close); a statement that leaves no
transaction open gives it back at once. The gate is only this process's: another process on the file (the
admin command line) still meets the busy handler, and a gate not free within `GATE_WAIT_S` is passed without
(the busy handler then decides, as before), so no two transactions of one coroutine on two connections can
deadlock on it.

`use(engine)` makes an async SQLite engine connect this way (SQLAlchemy's `do_connect` event hands the
dialect's connect arguments to `connect` here instead of `aiosqlite.connect`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

_Row = Any
_T = TypeVar("_T")
_Description = tuple[tuple[Any, ...], ...] | None

GATE_WAIT_S = 5.0
"""Longest a writer waits for the gate before it goes on without (SQLite's busy_timeout is as long)."""
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "BEGIN", "SAVEPOINT", "CREATE", "DROP", "ALTER")
"""First words of a statement that may start a write transaction (`WITH` may be a read: it gives the gate
back at once, as its statement leaves no transaction open)."""


def _writes(sql: str) -> bool:
    return sql.lstrip()[:9].upper().startswith(_WRITES)


class WriteGate:
    """One writing connection at a time in this process, the others waiting in asyncio, in turn."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._holder: Connection | None = None
        self.waiting = 0
        """Writers waiting for the gate now."""
        self.passed = 0
        """Writers that went on without the gate after `GATE_WAIT_S` (a sign of a stuck transaction)."""

    async def enter(self, conn: Connection) -> None:
        if self._holder is conn:
            return
        if self._lock.locked():
            self.waiting += 1
            try:
                await asyncio.wait_for(self._lock.acquire(), GATE_WAIT_S)
            except TimeoutError:
                self.passed += 1
                return
            finally:
                self.waiting -= 1
        else:
            await self._lock.acquire()
        self._holder = conn

    def leave(self, conn: Connection) -> None:
        if self._holder is conn:
            self._holder = None
            self._lock.release()


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
        conn = self._conn
        self._take(await conn.gated(sql, _run, conn._conn, sql, () if parameters is None else parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any] | dict[str, Any]]) -> Cursor:
        conn = self._conn
        self._take(await conn.gated(sql, _run_many, conn._conn, sql, parameters))
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
    """aiosqlite's connection with one-trip cursors, one-trip batches, free rollbacks of nothing, and its
    write transactions taken through the engine's `WriteGate`."""

    gate: WriteGate | None = None

    def cursor(self) -> Cursor:  # type: ignore[override]
        return Cursor(self)

    async def enter(self, sql: str) -> None:
        """Wait for the gate if `sql` may start a write transaction here."""
        raw = self._connection
        if self.gate is not None and raw is not None and not raw.in_transaction and _writes(sql):
            await self.gate.enter(self)

    def settle(self) -> None:
        """Give the gate back if this connection's transaction has ended (or never began)."""
        raw = self._connection
        if self.gate is not None and (raw is None or not raw.in_transaction):
            self.gate.leave(self)

    async def batch(self, statements: list[tuple[str, list[Sequence[Any]]]]) -> None:
        """Run `statements` (SQL and its parameter tuples, each an executemany) as one transaction, in
        one trip (`sqlite_steps`); the connection must have no transaction of SQLAlchemy's open."""
        await self.gated("BEGIN", _run_batch, self._conn, statements)

    async def gated(self, sql: str, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn(*args)` in the connection's thread, through the gate when `sql` may start a write."""
        await self.enter(sql)
        try:
            return await self._execute(fn, *args)
        finally:
            self.settle()

    async def commit(self) -> None:
        try:
            await super().commit()
        finally:
            self.settle()

    async def rollback(self) -> None:
        try:
            if self._connection is not None and not self._connection.in_transaction:
                return
            await super().rollback()
        finally:
            self.settle()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self.gate is not None:
                self.gate.leave(self)


def connect(database: str, gate: WriteGate | None = None, **kwargs: Any) -> Connection:
    """`aiosqlite.connect`'s twin: the connection (awaited by SQLAlchemy), its thread a daemon's as
    SQLAlchemy makes aiosqlite's, its writes through `gate`."""
    kwargs.pop("iter_chunk_size", None)
    conn = Connection(partial(sqlite3.connect, database, **kwargs), 64)
    conn._thread.daemon = True
    conn.gate = gate
    return conn


def use(engine: AsyncEngine) -> WriteGate:
    """Connect `engine` (async, SQLite) through `connect`, its connections sharing one `WriteGate`."""
    gate = WriteGate()

    @event.listens_for(engine.sync_engine, "do_connect")
    def _one_trip(_dialect: Any, _record: Any, _cargs: list[Any], cparams: dict[str, Any]) -> None:
        cparams["async_creator_fn"] = partial(connect, gate=gate)

    return gate
