"""The task state machine, in one place: which status may follow which."""

from __future__ import annotations

from app.protocol.model import TaskState


class InvalidTransitionError(Exception):
    """A status change the lifecycle forbids; nothing is written."""


_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: frozenset(
        {
            TaskState.WORKING,
            TaskState.INPUT_REQUIRED,
            TaskState.AUTH_REQUIRED,
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.CANCELED,
            TaskState.REJECTED,
        }
    ),
    TaskState.WORKING: frozenset(
        {
            TaskState.WORKING,
            TaskState.INPUT_REQUIRED,
            TaskState.AUTH_REQUIRED,
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.CANCELED,
            TaskState.REJECTED,
        }
    ),
    TaskState.INPUT_REQUIRED: frozenset(
        {TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
    ),
    TaskState.AUTH_REQUIRED: frozenset(
        {TaskState.WORKING, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
    ),
}


def check_transition(current: TaskState, new: TaskState) -> None:
    """Raise InvalidTransitionError unless `current` may become `new`. Terminal states allow nothing."""
    if new not in _ALLOWED.get(current, frozenset()):
        raise InvalidTransitionError(f"a task may not go from {current.value} to {new.value}")
