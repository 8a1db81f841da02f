"""The executor of a role this process serves but does not run (`AGENT_ROLES` leaves it out).

Every process accepts calls for every role: a new task of such a role waits in the queue for a process that
runs it, and an answer to one of its waiting tasks is recorded here and handed back to the queue (`working`,
nobody holding it), where a runner of the role claims it and resumes the agent with the answer. It still
reaps the role's tasks whose holder died: a role run only by remote workers has no runner anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.bus.base import Bus
from app.protocol.model import Message, TaskState
from app.store.leases import Leases
from app.store.outage import OutageLog
from app.tasks.live import LiveTasks

from .runner import lost_reason

log = logging.getLogger(__name__)


class Idle:
    """Runs nothing; implements `tasks.executor.Executor` for a role whose agents run elsewhere."""

    running = 0
    slots = 0

    def __init__(self, tasks: LiveTasks, leases: Leases, bus: Bus, reap_every_s: float) -> None:
        self._tasks = tasks
        self._leases = leases
        self._bus = bus
        self._every_s = reap_every_s
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
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def _reaper(self) -> None:
        """Mark expired leases and end the working tasks whose lease stayed void (as `Runner._reap`)."""
        outage = OutageLog("reaper")
        while True:
            try:
                await self._leases.suspect()
                for held in await self._leases.expired():
                    if held.state is TaskState.WORKING:
                        await self._tasks.end_lost(held, lost_reason(held.owner))
                outage.ok()
            except Exception as exc:
                outage.failed_or_bug(exc, log, "reaping failed; retrying")
            await asyncio.sleep(self._every_s)
