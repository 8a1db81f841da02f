"""The executor of a role this process serves but does not run (`AGENT_ROLES` leaves it out).

Every process accepts calls for every role: a new task of such a role waits in the queue for a process that
runs it, and an answer to one of its waiting tasks is recorded here and handed back to the queue (`working`,
nobody holding it), where a runner of the role claims it and resumes the agent with the answer. The role's
reaper (`reaper.py`, started beside it by the wiring) still ends its tasks whose holder died, and fails those
no live instance takes: a role run only by remote workers has no runner anywhere.
"""

from __future__ import annotations

from app.protocol.model import Message
from app.tasks.live import LiveTasks


class Idle:
    """Runs nothing; implements `tasks.executor.Executor` for a role whose agents run elsewhere."""

    running = 0
    slots = 0
    pure = False

    def __init__(self, tasks: LiveTasks) -> None:
        self._tasks = tasks

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
        await self._tasks.parts.bus.ring_queue()

    async def reply(self, owner: str, message: Message) -> Message | None:
        return None

    async def open(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
