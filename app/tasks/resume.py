"""Handing a running task on instead of failing it: its holder died (a void lease, a restart) or shut down
cleanly (a drain), and the task has a checkpoint (`store/run_checkpoints.py`) and attempts left
(RESUME_ATTEMPTS).

`hand_on` writes the `working` status that says so (`protocol/attempts.py`: the holder that stopped, the
attempt about to start) through `LiveTasks.apply`, then gives the lease up with the run's start cleared, so
the task is in the queue again: the next holder of its role claims it (`Leases.claim_queued` takes a `working`
task nobody holds) and its run finds the marker and restores the checkpoint (`TaskContext.resumed`). The
event log goes on from the same numbers; nothing of the stopped run that was committed is lost or repeated.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from app.protocol.attempts import attempts_of, resume_event

from .step import holder_name

if TYPE_CHECKING:
    from app.protocol.events import Event, EventRecord

    from .held import LiveTask
    from .parts import RoleParts

log = logging.getLogger(__name__)


class Writes(Protocol):
    """What handing on needs of the live tasks (`LiveTasks`, which imports this module)."""

    parts: RoleParts

    async def apply(self, live: LiveTask, events: list[Event]) -> list[EventRecord]: ...
    def lose(self, task_id: str) -> bool: ...


async def hand_on(tasks: Writes, live: LiveTask, why: str, holder: str) -> str | None:
    """Put `live` (held here, `working`) back in the queue to go on from its checkpoint; None when it did,
    else why it could not (to add to its failure's reason). `why`: what happened to `holder`, its previous
    holder. Raises what `apply` raises (a holder that committed first wins)."""
    parts = tasks.parts
    if parts.checkpoints is None or parts.resume_attempts <= 0:
        return ""
    task = live.task
    done = len(attempts_of(task.metadata))
    if done >= parts.resume_attempts:
        return (
            f" It went on from a checkpoint {done} time(s) already, the most RESUME_ATTEMPTS "
            f"({parts.resume_attempts}) allows."
        )
    info = await parts.checkpoints.info(task.id)
    if info is None:
        return ""  # an agent that keeps none (a Python agent), or a CLI killed before its first
    event = resume_event(
        task.id,
        task.context_id,
        attempt=done + 2,
        previous=holder_name(holder),
        reason=why,
        checkpoint_at=f"{info.taken_at:%Y-%m-%d %H:%M:%S} UTC",
    )
    await tasks.apply(live, [event])
    leases = parts.leases if live.holder is None else parts.leases.for_holder(live.holder)
    tasks.lose(task.id)
    await leases.release([task.id])
    await parts.bus.ring_queue()
    log.warning("task %s handed on from its checkpoint (attempt %d): %s", task.id, done + 2, why)
    return None
