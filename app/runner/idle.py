"""The executor of a role this process serves but does not run (`AGENT_ROLES` leaves it out).

Every process accepts calls for every role: a new task of such a role waits in the queue for a process that
runs it, and an answer to one of its waiting tasks is recorded here and handed back to the queue (`working`,
nobody holding it), where a runner of the role claims it and resumes the agent with the answer. It still
reaps the role's tasks whose holder died: a role run only by remote workers has no runner anywhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from app import background
from app.bus.base import Bus
from app.protocol.model import Message
from app.store.leases import Leases
from app.store.outage import OutageLog
from app.tasks.live import LiveTasks
from app.tasks.losses import Losses

from .runner import reap

log = logging.getLogger(__name__)


class Idle:
    """Runs nothing; implements `tasks.executor.Executor` for a role whose agents run elsewhere."""

    running = 0
    slots = 0
    pure = False

    def __init__(
        self,
        tasks: LiveTasks,
        losses: Losses,
        leases: Leases,
        bus: Bus,
        reap_every_s: float,
        role: str = "default",
        available: Callable[[], Awaitable[bool]] | None = None,
        role_wait_s: float = 30.0,
    ) -> None:
        self._tasks = tasks
        self._losses = losses
        self._leases = leases
        self._bus = bus
        self._every_s = reap_every_s
        self._role = role
        self._available = available
        """Whether an instance of the role is live anywhere (discovery); None: never refuse."""
        self._wait = timedelta(seconds=role_wait_s)
        self._loop: asyncio.Task[None] | None = None

    def reserve(self) -> bool:
        return False

    def release_slot(self) -> None:
        return None

    def start(self, task_id: str, reserved: bool = False) -> None:
        raise RuntimeError(f"task {task_id}: this process does not run its role")

    async def stop(self, task_id: str) -> None:
        return None

    def lost(self, task_id: str) -> None:
        return None

    async def answer(self, task_id: str, message: Message) -> None:
        """The answer is committed (the task is `working` again): let a runner of the role resume it."""
        await self._tasks.release([task_id])
        await self._bus.ring_queue()

    async def reply(self, owner: str, message: Message) -> Message | None:
        return None

    async def open(self) -> None:
        self._loop = asyncio.create_task(self._reaper(), name="reaper")

    async def aclose(self) -> None:
        await background.stop(self._loop)

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

    async def _reaper(self) -> None:
        """Mark expired leases and end the working tasks whose lease stayed void (as `Runner._reap`); fail
        tasks queued past ROLE_WAIT_S while the role has no live instance."""
        outage = OutageLog("reaper")
        while True:
            try:
                await reap(self._leases, self._losses)
                await self._refuse_unserved()
                outage.ok()
            except Exception as exc:
                outage.failed_or_bug(exc, log, "reaping failed; retrying")
            await asyncio.sleep(self._every_s)
