"""A group commit on SQLite in one trip to its connection's thread: the writer's fast path there.

Through SQLAlchemy's execute, a commit of a new task is one trip to aiosqlite's thread per statement (the
task, its message, its events, its artifacts, its counters) and one for the COMMIT: six trips, each a queue
put, a wake-up of that thread, a wake-up of the event loop through its self-pipe and the GIL handed over
twice, plus SQLAlchemy's execution machinery on the event loop for each statement. At one request at a
time nothing shares that cost, and a blocking send on SQLite cost about twice the server CPU of one on
PostgreSQL (whose fast path, `steps.py`, is one statement).

Here the writer's statements (`Plan`: Core statements, each with its rows) are compiled once per set of
keys by SQLAlchemy itself (`prepare`: the SQL text with its `?` parameters, and each parameter's type
processor: JSON through the engine's serializer, datetimes and booleans as SQLAlchemy stores them), the
rows turned into parameter tuples on the event loop, and the whole transaction (BEGIN, each statement's
`executemany`, COMMIT, or a ROLLBACK on any error) runs in one call in the connection's thread
(`sqlite_hops.Connection.batch`). An error is raised as SQLAlchemy's (`DBAPIError.instance`): the writer
names a taken key from an IntegrityError, and `outage.is_unavailable` knows a locked or unreadable file, as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable

from .sqlite_hops import Connection

Plan = list[tuple[Executable, list[dict[str, Any]]]]
"""A transaction's statements in order, each with its rows (an executemany)."""

_Processor = Callable[[Any], Any] | None
_Source = tuple[str, bool, Any, _Processor]
"""A parameter: the row key it reads, or (when the row has none) the constant it takes instead (a literal
of the statement, a column's scalar default), and its type's processor."""


class Prepared:
    """One statement compiled for SQLite for rows with one set of keys."""

    def __init__(self, dialect: Dialect, stmt: Executable, keys: Sequence[str]) -> None:
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
        if compiled.positiontup is None:
            raise ArgumentError("a positional paramstyle was expected (SQLite's `?`)")
        self.sql = str(compiled)
        defaults = {
            col.key: col.default
            for col in getattr(compiled, "insert_prefetch", ())
            if col.default is not None
        }
        present = set(keys)
        sources: list[_Source] = []
        for name in compiled.positiontup:
            bind = compiled.binds[name]
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if name in present:
                sources.append((name, True, None, processor))
            elif name in defaults and defaults[name].is_scalar:
                sources.append((name, False, defaults[name].arg, processor))  # type: ignore[attr-defined]
            elif not bind.required and bind.callable is None and name not in defaults:
                sources.append((name, False, bind.value, processor))
            else:
                raise ArgumentError(f"no value for parameter {name!r} of {self.sql!r}")
        self._sources = sources

    def params(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """The rows as this statement's parameter tuples, each value through its type's processor."""
        out = []
        for row in rows:
            values = []
            for name, from_row, constant, processor in self._sources:
                value = row[name] if from_row else constant
                # None too: a JSON column stores Python's None as JSON null, as SQLAlchemy does.
                values.append(processor(value) if processor is not None else value)
            out.append(tuple(values))
        return out


_prepared: dict[tuple[int, tuple[str, ...]], tuple[Executable, Prepared]] = {}
"""Compiled statements by statement (its id, the statement kept alive beside it) and row keys."""


def prepare(dialect: Dialect, stmt: Executable, rows: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """`stmt` with `rows`, as (SQL, parameter tuples) per set of row keys (rows of one key set each)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    out: list[tuple[str, list[Any]]] = []
    for keys, group in groups.items():
        hit = _prepared.get((id(stmt), keys))
        if hit is None or hit[0] is not stmt:
            hit = _prepared[(id(stmt), keys)] = (stmt, Prepared(dialect, stmt, keys))
        out.append((hit[1].sql, hit[1].params(group)))
    return out


async def write(engine: AsyncEngine, plan: Plan) -> None:
    """Run `plan` as one transaction, in one trip to the connection's thread."""
    statements = [s for stmt, rows in plan if rows for s in prepare(engine.dialect, stmt, rows)]
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert isinstance(driver, Connection)
        await driver.batch(statements)
