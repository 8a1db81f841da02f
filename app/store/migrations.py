"""The alembic migrations shipped with this code, found from the package (not the working folder), so that
`a2a-server migrate` and `/readyz`'s head check work from wherever the server is started."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory

import app

ROOT = Path(app.__file__).resolve().parent.parent
"""The checkout (or image folder) holding `alembic.ini` and `migrations/`."""


def config(database_url: str | None = None) -> Config:
    """Alembic's configuration for this code's migrations, on `database_url` when given (else env.py takes
    the settings')."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    if database_url is not None:
        cfg.set_main_option("sqlalchemy.url", database_url)
    return cfg


def upgrade(database_url: str) -> None:
    """Migrate the database to this code's head."""
    from alembic import command

    command.upgrade(config(database_url), "head")


@lru_cache
def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


UNMIGRATED_CHECK_S = 5.0
"""Longest the start-up check waits for the database: one it cannot reach is the server's outage handling's
to wait for, not this check's."""


def unmigrated(database_url: str) -> str | None:
    """Why a server cannot start on this database at all (it has never been migrated: no `alembic_version`
    table), as one line; None when it has been, or when it cannot be reached within `UNMIGRATED_CHECK_S`.
    A database behind this code's head is `/readyz`'s to report (a roll may migrate it next)."""
    import asyncio

    from sqlalchemy import inspect

    from .db import create_engine

    async def check() -> bool:
        engine = create_engine(database_url, timeout_s=UNMIGRATED_CHECK_S)
        try:
            async with asyncio.timeout(UNMIGRATED_CHECK_S), engine.connect() as conn:
                return await conn.run_sync(lambda c: inspect(c).has_table("alembic_version"))
        finally:
            await engine.dispose()

    try:
        migrated = asyncio.run(check())
    except Exception:  # unreachable, refused: the server's own start-up says so, and waits
        return None
    if migrated:
        return None
    return (
        "the database has never been migrated (no tables): run `a2a-server migrate` first (`make run` does)"
    )
