"""SQLite's WAL checkpoints, off the commit path.

By default SQLite checkpoints in the connection whose commit pushes the WAL past 1,000 pages: that commit
then copies the pages into the database file and syncs it before it returns, and every write queued behind
it (the group-commit writer has one flusher on SQLite) waits as long. The server's engine turns that off
(`create_engine(..., own_checkpoints=True)`) and runs this loop instead: a PASSIVE checkpoint on a
connection of its own, which copies what no reader still needs while writers go on appending to the WAL.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from app.background import stop

log = logging.getLogger(__name__)

CHECKPOINT_S = 1.0
"""How often the WAL is checkpointed (at about 2,000 tasks a second it grows some MiB in that time)."""


class Checkpoints:
    """Checkpoints the WAL of a SQLite engine every `interval_s` while open."""

    def __init__(self, engine: AsyncEngine, interval_s: float | None = None) -> None:
        self._engine = engine
        self._interval_s = interval_s or CHECKPOINT_S
        self._task: asyncio.Task[None] | None = None
        self.done = 0
        """Checkpoints run (read by the tests)."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sqlite-checkpoints")

    async def aclose(self) -> None:
        await stop(self._task)
        self._task = None

    async def checkpoint(self) -> tuple[int, int]:
        """One PASSIVE checkpoint: never waits for a writer or a reader, copies what it can. Returns the
        WAL's frames and how many of them are now in the database file."""
        async with self._engine.connect() as conn:
            row = (await conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")).one()
        self.done += 1
        return row[1], row[2]

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.checkpoint()
            except Exception:
                # A busy or broken database file: the next round tries again, the commits go on meanwhile.
                log.warning("SQLite WAL checkpoint failed", exc_info=True)
