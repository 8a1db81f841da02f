"""How one step of a held task commits: at once for a request, or, for the task's own run, waiting out a
database that is away up to the outage grace.

It imports the stores (the writer; the leases, to read what a retried commit left; `rows`, `outage`) and
`held.py`; the live tasks (`live.py`) commit every step through it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from app.store import rows
from app.store.outage import OutageLog, backoff, is_unavailable
from app.store.writer import SeqTakenError

from .held import UnrecordedError

if TYPE_CHECKING:
    from app.store.leases import Leases
    from app.store.write import Write
    from app.store.writer import Writer

    from .held import LiveTask


class Commits:
    """Commits the steps of one role's held tasks through the group-commit writer."""

    def __init__(self, writer: Writer, leases: Leases, outage_grace_s: float) -> None:
        self._writer = writer
        self._leases = leases
        self._grace_s = outage_grace_s
        self._outage = OutageLog("task runs")

    async def commit(self, live: LiveTask, write: Write, wait: bool) -> None:
        """Commit one step of the task. With `wait`, retry while the database is away, with backoff, for
        up to the outage grace (then UnrecordedError); the caller holds the task's lock, so its steps still
        commit in order. A retry that hits its own event numbers checks whether the first try did land
        (its answer lost with the connection) before calling it a conflict."""
        if not wait:
            await self._writer.commit(write)
            return
        deadline: float | None = None
        delay = 0.05
        try:
            while True:
                try:
                    await self._writer.commit(write)
                    break
                except SeqTakenError:
                    if deadline is not None and await self._landed(write):
                        break
                    raise
                except Exception as exc:
                    if not is_unavailable(exc):
                        raise
                    self._outage.failed(exc)
                    live.stalled = True
                    now = time.monotonic()
                    deadline = deadline or now + self._grace_s
                    if now >= deadline:
                        raise UnrecordedError(live.task.id) from exc
                    await asyncio.sleep(min(delay, deadline - now))
                    delay = backoff(delay)
            self._outage.ok()
        finally:
            live.stalled = False

    async def landed_unseen(self, live: LiveTask) -> bool:
        """Whether the task as stored is further on than `live` and still held by this replica: a step of
        its own landed unseen, its caller cancelled mid-commit (a run's hard limit, a stop), for the writer
        still stores what it was given. Not known with the database away: taken as not."""
        try:
            stored = await self._leases.recorded(live.task.id)
        except Exception as exc:
            if is_unavailable(exc):
                return False
            raise
        return stored is not None and stored[1] == self._leases.replica_id and stored[0] > live.seq

    async def _landed(self, write: Write) -> bool:
        """Whether `write` is what the database holds as the task's latest step."""
        assert write.task_update is not None
        task_id, mark = rows.update_mark(write.task_update)
        try:
            stored = await self._leases.recorded(task_id)
        except Exception as exc:
            if is_unavailable(exc):
                return False
            raise
        return stored == mark
