"""A task's attempts: each time its holder died or shut down and the task went on elsewhere from its
checkpoint instead of failing.

The server writes one `working` status event for it (`resume_event`): its message says which holder stopped
and that the task goes on, and the event's and the message's metadata carry `resume` (`{"attempt", "previous",
"reason", "checkpointAt"}`). `tasks/step.py` keeps each in the task's metadata under `attempts`, so a client
and the console see them; the run that goes on finds the marker as the last message of the task's history.
"""

from __future__ import annotations

from typing import Any

from .events import StatusUpdate, status_update
from .model import TaskState

RESUME_KEY = "resume"
"""The key of a resume's status event's (and its message's) metadata."""
ATTEMPTS_KEY = "attempts"
"""The key of the task's metadata listing its resumes, oldest first."""


def resume_event(
    task_id: str, context_id: str, *, attempt: int, previous: str, reason: str, checkpoint_at: str
) -> StatusUpdate:
    """The `working` status that hands the task to its next holder: `attempt` is the run about to start (2
    for the first resume), `previous` who ran it ("replica r1", "worker w1"), `reason` why it stopped."""
    text = (
        f"{reason} The task goes on from its checkpoint of {checkpoint_at} on the next available agent "
        f"(attempt {attempt})."
    )
    event = status_update(task_id, context_id, TaskState.WORKING, text)
    info = {"attempt": attempt, "previous": previous, "reason": reason, "checkpointAt": checkpoint_at}
    event.metadata = {RESUME_KEY: info}
    assert event.status.message is not None
    event.status.message.metadata = {RESUME_KEY: dict(info)}
    return event


def resume_of(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The resume a status event's (or message's) metadata carries, if it carries a valid one."""
    raw = (metadata or {}).get(RESUME_KEY)
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("attempt"), int)
        or not isinstance(raw.get("previous"), str)
        or not isinstance(raw.get("reason"), str)
    ):
        return None
    return raw


def attempts_of(metadata: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The resumes a task's metadata lists (`ATTEMPTS_KEY`)."""
    raw = (metadata or {}).get(ATTEMPTS_KEY)
    return [a for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
