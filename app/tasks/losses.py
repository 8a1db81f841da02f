"""Endings of tasks no run will end, a replica's alone: a running task whose holder is gone (`end_lost`:
a void lease, or what this replica's previous life ran), unless it goes on elsewhere from its checkpoint
(`resume.hand_on`), and a queued task whose role has no live instance (`refuse`). A remote worker ends
neither: the replicas do.

A failed task's children still running are canceled (the wiring's cascade, as for a canceled task): nothing
is left to read their answers. It imports the live tasks (`live.py`), through whose `apply` every ending
goes, `held.py` and the stores; the reaper (`runner/reaper.py`, one per role, its `Losses` given by the
wiring) calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from app.protocol.events import status_update
from app.protocol.model import TaskState
from app.store.writer import SeqTakenError

from .held import LiveTask
from .resume import hand_on

if TYPE_CHECKING:
    from app.store.leases import Held

    from .live import LiveTasks

log = logging.getLogger(__name__)


class Losses:
    """Ends one role's tasks that lost their run or will never get one, through its live tasks."""

    def __init__(self, tasks: LiveTasks, ended: Callable[[str, str], Awaitable[None]] | None = None) -> None:
        """`ended(owner, task_id)`: cancels the children a failed task's lost run left running (the wiring's
        cascade); a task handed on keeps them, for its next run."""
        self._tasks = tasks
        self._ended = ended
        self._leases = tasks.parts.leases
        self._repo = tasks.parts.repo

    async def end_lost(self, held: Held, why: str, *, restarted: bool = False) -> bool:
        """Hand on (`resume.hand_on`) or else fail a working task whose agent is gone, if this replica can
        take it; True when it did. `why`: what happened to its holder (the failure adds that the agent's
        work was lost, and why it could not go on).

        With `restarted`, the holder is this replica's previous life (its name): gone for sure. Otherwise
        the lease is seized only if its holder left it void (`Leases.seize`), and a holder that commits
        after the seizure wins: its newer event number stops this write."""
        expected: int | None = None
        if restarted:
            if not await self._leases.take(held.task_id):
                return False
        else:
            seized = await self._leases.seize(held)
            if seized is None:
                return False
            expected = seized.last_seq
        stored = await self._repo.get_task(held.task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return False
        if expected is not None and stored.last_seq != expected:
            log.warning(
                "task %s: its holder %s committed as it was reaped; left to it", held.task_id, held.owner
            )
            return False
        live = LiveTask(stored.task, stored.owner, expected or stored.last_seq, stored.push)
        self._tasks.hold(live)
        try:
            not_on = await hand_on(self._tasks, live, why, held.owner)
            if not_on is None:
                if not restarted:
                    self._tasks.notices.tell(held.owner, held.task_id)
                return True
            reason = f"{why} The agent's work was lost.{not_on}"
            event = status_update(held.task_id, stored.task.context_id, TaskState.FAILED, reason)
            ended = bool(await self._tasks.apply(live, [event]))
        except SeqTakenError:
            return False
        if ended:
            # The one line a lost run leaves on the replica that ended it (a hand-on says its own).
            log.warning("task %s ended failed: %s", held.task_id, reason)
            if not restarted:
                self._tasks.notices.tell(held.owner, held.task_id)
            if self._ended is not None:
                await self._ended(stored.owner, held.task_id)
        return ended

    async def refuse(self, task_id: str, reason: str) -> bool:
        """Fail a queued task nobody will run (its role has no live instance), if it is still queued and
        nobody has claimed it (`Leases.take_queued`); True when it did. A claim that came between the
        reaper's look and this is left to its holder, even with its lease expired: taking it, then letting
        it go for not being queued, would drop a live run's lease with nothing written."""
        if not await self._leases.take_queued(task_id):
            return False
        stored = await self._repo.get_task(task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state is not TaskState.SUBMITTED:
            await self._leases.release([task_id])
            return False
        live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push)
        event = status_update(task_id, stored.task.context_id, TaskState.FAILED, reason)
        try:
            refused = bool(await self._tasks.apply(live, [event]))
        except SeqTakenError:
            return False
        if refused:
            log.warning("task %s ended failed: %s", task_id, reason)
        return refused
