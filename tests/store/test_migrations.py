"""The alembic revision builds exactly the models' schema on both dialects, and downgrades cleanly."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, inspect, text

from app.protocol.model import utcnow
from app.store import migrations
from app.store.db import create_engine
from app.store.models import ArtifactRow, Base, TaskRow
from app.store.repo import Repository
from tests.conftest import BACKENDS, database_url
from tests.support.server import BIN, ROOT


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


@pytest.mark.parametrize("backend", BACKENDS)
async def test_scale_revision_backfills_counters_and_reads_old_chunks(backend, tmp_path):
    """Data from before the counters: totalSize counts it, and a finished task's artifacts stored as chunks
    read as their fold."""
    url = await database_url(backend, tmp_path)
    alembic(url, "upgrade", "0005")
    engine = create_engine(url)
    now = datetime.now(UTC)
    rows = [("t1", "a", "c1"), ("t2", "a", "c1"), ("t3", "a", "c2"), ("t4", "b", "c1")]
    try:
        async with engine.begin() as conn:
            for i, (tid, owner, ctx) in enumerate(rows):
                stamp = f"2026-01-01T00:00:0{i}.000Z"
                await conn.execute(
                    insert(TaskRow).values(
                        id=tid,
                        context_id=ctx,
                        owner=owner,
                        state="completed",
                        status={"state": "completed", "timestamp": stamp},
                        transitions=[],
                        metadata=None,
                        last_seq=4,
                        created_at=now,
                        updated_at=now,
                        status_at=stamp,
                    )
                )
            chunks = [(2, False, "a"), (3, True, "b"), (4, True, "c")]
            for seq, append, text_ in chunks:
                body = {"artifactId": "x", "parts": [{"text": text_}]}
                await conn.execute(
                    insert(ArtifactRow).values(
                        task_id="t1", seq=seq, artifact_id="x", append=append, body=body
                    )
                )
        alembic(url, "upgrade", "head")
        repo = Repository(engine)
        page = await repo.list_tasks(
            "a", context_id=None, state=None, after=None, page_size=2, page_token=None, artifacts=False
        )
        assert page.total == 3 and page.next_token
        by_ctx = await repo.list_tasks(
            "a", context_id="c1", state=None, after=None, page_size=5, page_token=None, artifacts=False
        )
        assert by_ctx.total == 2 and [t.id for t in by_ctx.tasks] == ["t2", "t1"]
        stored = await repo.get_task("t1", owner="a")
        assert stored is not None
        assert [[p.text for p in a.parts] for a in stored.task.artifacts] == [["a", "b", "c"]]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_downgrade_of_0006_keeps_history_and_one_row_per_reused_message_id(backend, tmp_path):
    """0006 lets a messageId recur; going back keeps every task's history but the repeats (the older
    schema's unique key), and never cascades a table copy into the history."""
    url = await database_url(backend, tmp_path)
    alembic(url, "upgrade", "0006_idem")
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO tasks (id, context_id, owner, state, status, transitions, last_seq,"
                    " created_at, updated_at, status_at, retry_key) VALUES ('t', 'c', 'o', 'completed', '{}',"
                    " '[]', 1, :now, :now, '2026-01-01T00:00:00.000Z', NULL)"
                ),
                {"now": utcnow()},
            )
            for mid in ("m", "m", "n"):
                await conn.execute(
                    text(
                        "INSERT INTO messages (task_id, owner, message_id, role, body, created_at)"
                        " VALUES ('t', 'o', :mid, 'user', '{}', :now)"
                    ),
                    {"mid": mid, "now": utcnow()},
                )
        alembic(url, "downgrade", "0005")
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT message_id FROM messages ORDER BY id"))).scalars().all()
        assert rows == ["m", "n"]
    finally:
        await engine.dispose()


def test_migrate_works_from_any_working_folder(tmp_path):
    """`a2a-server migrate` finds this code's migrations from the package, not the working folder: run from
    an empty one, it brings a new SQLite file to the head `/readyz` checks for (it once failed there with
    alembic's "No 'script_location' key found")."""
    db = tmp_path / "db.sqlite"
    done = subprocess.run(
        [str(BIN / "a2a-server"), "migrate"],
        cwd=tmp_path,
        env={**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{db}"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert version == migrations.script().get_current_head()
    assert {"tasks", "events"} <= tables


def test_serve_on_a_database_never_migrated_exits_with_one_line_saying_to_migrate(tmp_path):
    """`a2a-server serve` on an empty database exits at once with one line naming the fix, not the 40-line
    traceback of the first query ("no such table: tasks"); migrated, the same command gets past that check
    (it then fails on the taken port, which proves it did)."""
    db = tmp_path / "db.sqlite"
    env = {**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{db}", "AUTH_MODE": "off", "GRPC_PORT": "0"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env["PORT"] = str(taken.getsockname()[1])
        done = subprocess.run(
            [str(BIN / "a2a-server"), "serve"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
        assert done.stderr.strip().splitlines() == [
            "error: the database has never been migrated (no tables): run `a2a-server migrate` first"
            " (`make run` does)"
        ], done.stderr[-2000:]
        assert "Traceback" not in done.stdout + done.stderr
        migrations.upgrade(f"sqlite+aiosqlite:///{db}")
        served = subprocess.run(
            [str(BIN / "a2a-server"), "serve"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert "never been migrated" not in served.stderr, served.stderr[-2000:]
    assert served.returncode != 0 and "address already in use" in (served.stdout + served.stderr).lower()
