"""Engine set-up for both dialects: SQLite (WAL) as the default, PostgreSQL via asyncpg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from . import sqlite_hops


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def create_engine(
    url: str,
    timeout_s: float = 10.0,
    statement_timeout_s: float = 30.0,
    own_checkpoints: bool = False,
    pool_size: int = 10,
    synchronous_commit: bool = True,
) -> AsyncEngine:
    """An async engine with orjson for JSON columns; SQLite gets WAL and foreign keys, and with
    `own_checkpoints` no automatic WAL checkpoints (the caller runs `checkpoints.Checkpoints`).

    Every wait on the database is bounded, so a call made while it is away fails within a known time
    instead of hanging: waiting for a pooled connection and connecting take at most `timeout_s`, a
    statement at most `statement_timeout_s` (asyncpg's client-side timeout, which also holds when the
    server stops answering).

    PostgreSQL only: `pool_size` connections kept (as many again on demand), and with `synchronous_commit`
    False every session commits without waiting for the WAL flush (the push deliverer's bookkeeping,
    `app.push.outbox`).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url,
            json_serializer=_dumps,
            json_deserializer=orjson.loads,
            pool_size=8,
            pool_timeout=timeout_s,
        )

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            if own_checkpoints:
                cur.execute("PRAGMA wal_autocheckpoint=0")
            cur.close()

        sqlite_hops.use(engine)
        return engine
    engine = create_async_engine(
        url,
        json_serializer=_dumps,
        json_deserializer=orjson.loads,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_timeout=timeout_s,
        connect_args={
            "timeout": timeout_s,
            "command_timeout": statement_timeout_s,
            **({} if synchronous_commit else {"server_settings": {"synchronous_commit": "off"}}),
        },
    )
    event.listen(engine.sync_engine, "checkout", _refuse_closed)
    return engine


def _refuse_closed(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
    """Never hand out a pooled connection the server has closed (a restart, an idle timeout).

    asyncpg marks a connection closed as soon as its socket sees the server hang up, so this costs no round
    trip, unlike `pool_pre_ping`. `DisconnectionError` makes the pool drop it and check out another (a
    fresh connect when every pooled one is dead), so the first calls after a database restart succeed
    instead of failing on connections the restart killed.
    """
    if dbapi_conn.driver_connection.is_closed():
        raise DisconnectionError("pooled connection closed by the server")
