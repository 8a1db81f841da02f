"""The alembic revision builds exactly the models' schema on both dialects, and downgrades cleanly."""

from __future__ import annotations

import os
import subprocess

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.store.db import create_engine
from app.store.models import Base
from tests.conftest import BACKENDS, database_url
from tests.server import BIN, ROOT


def alembic(url: str, *args: str) -> None:
    subprocess.run(
        [str(BIN / "alembic"), *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        capture_output=True,
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_upgrade_matches_models_and_downgrade_removes_all(backend, tmp_path):
    url = await database_url(backend, tmp_path)
    alembic(url, "upgrade", "head")
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            def diff(sync_conn):
                ctx = MigrationContext.configure(sync_conn, opts={"compare_type": False})
                return compare_metadata(ctx, Base.metadata)

            assert await conn.run_sync(diff) == []
        alembic(url, "downgrade", "base")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: inspect(c).get_table_names())
        assert set(tables) <= {"alembic_version"}
        alembic(url, "upgrade", "head")
    finally:
        await engine.dispose()
