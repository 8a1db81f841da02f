"""SQLite WAL checkpoints off the commit path (`store/checkpoints.py`): the server's engine never checkpoints
in a committing connection, and its own loop copies the WAL into the database file."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from app.store import checkpoints as checkpoints_module
from app.store.checkpoints import Checkpoints
from app.store.db import create_engine
from tests.support.inproc import WAIT_S, running, send


async def _autocheckpoint(engine) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one()


async def test_own_checkpoints_turn_the_automatic_ones_off(tmp_path):
    own = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'own.db'}", own_checkpoints=True)
    default = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'default.db'}")
    try:
        assert await _autocheckpoint(own) == 0
        assert await _autocheckpoint(default) == 1000
    finally:
        await own.dispose()
        await default.dispose()


async def test_a_checkpoint_copies_the_wal_into_the_database_and_the_loop_keeps_doing_it(tmp_path):
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}", own_checkpoints=True)
    checkpoints = Checkpoints(engine, interval_s=0.01)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x TEXT)"))
        for _ in range(20):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (:x)"), [{"x": "y" * 500}] * 50)
        frames, copied = await checkpoints.checkpoint()
        assert frames > 0 and copied == frames
        checkpoints.start()
        async with asyncio.timeout(WAIT_S):
            while checkpoints.done < 3:
                await asyncio.sleep(0.01)
    finally:
        await checkpoints.aclose()
        await engine.dispose()


async def test_the_server_on_sqlite_runs_its_own_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_S", 0.01)
    copied: list[int] = []
    checkpoint = Checkpoints.checkpoint

    async def counted(self: Checkpoints) -> tuple[int, int]:
        frames, done = await checkpoint(self)
        copied.append(done)
        return frames, done

    monkeypatch.setattr(Checkpoints, "checkpoint", counted)

    async def script(task) -> None:
        await task.say("ok")

    async with running(tmp_path, script) as c:
        assert await _autocheckpoint(c.engine) == 0
        task = await send(c, "hello")
        assert task.status.state.value == "completed"
        async with asyncio.timeout(WAIT_S):
            while not any(copied):
                await asyncio.sleep(0.01)
