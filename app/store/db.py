"""Engine set-up for both dialects: SQLite (WAL) as the default, PostgreSQL via asyncpg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def create_engine(url: str) -> AsyncEngine:
    """An async engine with orjson for JSON columns; SQLite gets WAL and foreign keys."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, json_serializer=_dumps, json_deserializer=orjson.loads, pool_size=8)

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        return engine
    return create_async_engine(
        url,
        json_serializer=_dumps,
        json_deserializer=orjson.loads,
        pool_size=10,
        max_overflow=10,
        pool_pre_ping=False,
    )
