"""The task state machine, in one place: which status may follow which."""

from __future__ import annotations

from app.protocol.model import TaskState


class InvalidTransitionError(Exception):
    """A status change the lifecycle forbids; nothing is written."""


_ENDINGS = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
_FROM_ACTIVE = _ENDINGS | {TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED}
_FROM_INTERRUPTED = frozenset({TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})

_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: _FROM_ACTIVE,
    TaskState.WORKING: _FROM_ACTIVE,
    TaskState.INPUT_REQUIRED: _FROM_INTERRUPTED,
    TaskState.AUTH_REQUIRED: _FROM_INTERRUPTED,
}


def check_transition(current: TaskState, new: TaskState) -> None:
    """Raise InvalidTransitionError unless `current` may become `new`. Terminal states allow nothing."""
    if new not in _ALLOWED.get(current, frozenset()):
        raise InvalidTransitionError(f"a task may not go from {current.value} to {new.value}")
