"""The calls a run's agent gets (`RunCalls`): its server's (`LocalCalls` on a replica, a remote worker's
own over the worker API), with what the run owes its task on top of them.

- A child's usage is rolled up once: the first time a call returns a child that has ended, its usage
  summary goes into the parent task's `metadata.usage.children` through the run's own events
  (`TaskContext.record_child`; the step adds each child once, by its id). No usage row is written for it:
  the child's reports are counted where the child recorded them, so the principal's sums count each once.
- When the run ends its task (completed, failed, timed out), the children it started that still run are
  canceled (a task canceled through the API cancels its children itself: `TaskService.cancel`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.agents.calls import AgentCalls, AgentInfo, CallError, ChildTask
from app.protocol.model import Part, TaskState

log = logging.getLogger(__name__)

Record = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Records an ended child's usage summary (its id, its summary) into the run's own task."""


class RunCalls:
    """`AgentCalls` around a run's server's, rolling children's usage up and canceling the ones left."""

    def __init__(self, calls: AgentCalls, record: Record) -> None:
        self._calls = calls
        self._record = record
        self._counted: set[str] = set()
        self._open: set[str] = set()
        """Children seen not ended: canceled when the run ends its task (`close`)."""

    async def list_agents(self) -> Sequence[AgentInfo]:
        return await self._calls.list_agents()

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask:
        return await self._seen(await self._calls.send_to_agent(role, text, files, wait))

    async def get_task(self, task_id: str) -> ChildTask:
        return await self._seen(await self._calls.get_task(task_id))

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask:
        return await self._seen(await self._calls.answer_task(task_id, text, wait))

    async def cancel_task(self, task_id: str) -> ChildTask:
        return await self._seen(await self._calls.cancel_task(task_id))

    async def close(self) -> None:
        """Cancel the children seen still running, all at once (one that ended meanwhile stays as it is)."""
        if not self._open:
            return
        results = await asyncio.gather(
            *(self._calls.cancel_task(t) for t in sorted(self._open)), return_exceptions=True
        )
        for task_id, result in zip(sorted(self._open), results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, CallError):
                log.warning("child task %s could not be canceled: %r", task_id, result)
        self._open.clear()

    async def _seen(self, child: ChildTask) -> ChildTask:
        """Note the child's state; the first time it comes back ended, record its usage into the task."""
        if not child.task_id:
            return child
        if not _ended(child.state):
            self._open.add(child.task_id)
            return child
        self._open.discard(child.task_id)
        if child.task_id not in self._counted:
            self._counted.add(child.task_id)
            if child.usage:
                await self._record(child.task_id, dict(child.usage))
        return child


def _ended(state: str) -> bool:
    try:
        return TaskState(state).terminal
    except ValueError:
        return False
