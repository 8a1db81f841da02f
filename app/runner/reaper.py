"""The reaper: one per role on a replica, ending the role's tasks no run will end (`tasks/losses.py`).

- A running task whose holder stopped renewing its lease (a replica that died, a remote worker cut off): each
  pass marks the expired leases (`Leases.suspect`) and ends the running tasks whose lease stayed void a lease
  TTL after its mark (`Leases.expired`), never a run alive here.
- For a role run here: the running tasks this replica's previous life held, once at start (their agents were
  lost with it); the runner recovers the rest.
- Either way a task with a checkpoint and attempts left goes on elsewhere instead (`tasks/resume.py`).
- For a role run only elsewhere (`runner/idle.py`): its tasks queued past ROLE_WAIT_S while no instance of it
  is live anywhere.

A remote worker has none: the replicas reap for it. It imports the leases store and `tasks/losses.py`, not
the runner: the wiring gives it the runner's live runs as a callable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from datetime import timedelta
from typing import TYPE_CHECKING

from app import background
from app.store.outage import OutageLog, is_unavailable
from app.tasks.step import holder_name

if TYPE_CHECKING:
    from app.store.leases import Leases
    from app.tasks.losses import Losses

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Longest wait before the next pass after the database failed one."""


class Reaper:
    """The reaper loop of one role, over its leases and its `Losses`."""

    def __init__(
        self,
        leases: Leases,
        losses: Losses,
        every_s: float,
        role: str = "default",
        *,
        alive: Callable[[], Collection[str]] | None = None,
        available: Callable[[], Awaitable[bool]] | None = None,
        role_wait_s: float = 30.0,
    ) -> None:
        """`alive`: the role runs here, these are its runs (never reaped; its previous life's running tasks
        are ended at start). `available`: the role does not run here; whether an instance of it is live
        anywhere (discovery), to fail what waits in vain (None: never refuse)."""
        self._leases = leases
        self._losses = losses
        self._every_s = every_s
        self._role = role
        self._alive = alive
        self._recovered = alive is None
        self._available = available
        self._wait = timedelta(seconds=role_wait_s)
        self._loop: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """End what this replica's previous life left running (with the database away, the first pass that
        finds it back does), then reap every `every_s`."""
        try:
            await self._recover()
        except Exception as exc:
            if not is_unavailable(exc):
                raise
        self._loop = asyncio.create_task(self._reaper(), name="reaper")

    async def aclose(self) -> None:
        await background.stop(self._loop)

    async def sweep(self) -> None:
        """One pass: the previous life's running tasks (until done), void leases, and the unserved queue."""
        if not self._recovered:
            await self._recover()
        await reap(self._leases, self._losses, self._alive() if self._alive is not None else ())
        await self._refuse_unserved()

    async def _reaper(self) -> None:
        outage = OutageLog("reaper")
        while True:
            wait = self._every_s
            try:
                await self.sweep()
                outage.ok()
            except Exception as exc:
                if outage.failed_or_bug(exc, log, "reaping failed; retrying"):
                    wait = min(wait, RETRY_S)
            await asyncio.sleep(wait)

    async def _recover(self) -> None:
        """End the running tasks this replica's previous life held (`Held.running`): never run again."""
        if self._recovered:
            return
        for held in await self._leases.mine():
            if held.running:
                await self._losses.end_lost(held, restarted_reason(held.owner), restarted=True)
        self._recovered = True

    async def _refuse_unserved(self) -> None:
        """Fail the role's tasks queued for ROLE_WAIT_S while no instance of the role is live anywhere."""
        if self._available is None:
            return
        waiting = await self._leases.queued_before(self._wait)
        if not waiting or await self._available():
            return
        seconds = self._wait.total_seconds()
        reason = (
            f"No agent of the role {self._role!r} is available: none was live for {seconds:g} s after this "
            "task was sent, so it was not started. Send it again once one is (GET /agents lists them)."
        )
        for task_id in waiting:
            await self._losses.refuse(task_id, reason)


async def reap(leases: Leases, losses: Losses, alive: Collection[str] = ()) -> None:
    """One pass over void leases: mark the leases found expired, end the running tasks (`Held.running`:
    working, or submitted with a run started) whose lease stayed void. Never a run in `alive`: the one guard
    against a reaper ending a live run of its own replica. Queued and waiting tasks need nothing: claims take
    a void lease, answers an expired one."""
    await leases.suspect()
    for held in await leases.expired():
        if held.running and held.task_id not in alive:
            await losses.end_lost(held, lost_reason(held.owner))


def restarted_reason(holder: str) -> str:
    """What happened to a task whose holder is this replica's previous life: it restarted under its name."""
    return f"{holder_name(holder, start=True)} restarted while this task was running."


def lost_reason(holder: str) -> str:
    """What happened to a task's holder (a replica, or a remote worker) when a reaper takes the task: it
    stopped renewing its lease."""
    return (
        f"{holder_name(holder, start=True)} running this task stopped renewing its lease "
        "(it died or lost contact)."
    )
