"""The state machine: the lifecycle's allowed moves, and nothing out of a terminal state."""

from __future__ import annotations

import pytest

from app.protocol.model import TERMINAL_STATES, TaskState
from app.tasks.state import InvalidTransitionError, check_transition


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (TaskState.SUBMITTED, TaskState.WORKING),
        (TaskState.WORKING, TaskState.WORKING),
        (TaskState.WORKING, TaskState.INPUT_REQUIRED),
        (TaskState.INPUT_REQUIRED, TaskState.WORKING),
        (TaskState.WORKING, TaskState.COMPLETED),
        (TaskState.INPUT_REQUIRED, TaskState.CANCELED),
        (TaskState.SUBMITTED, TaskState.REJECTED),
    ],
)
def test_allowed(current, new):
    check_transition(current, new)


@pytest.mark.parametrize("current", sorted(TERMINAL_STATES))
@pytest.mark.parametrize("new", list(TaskState))
def test_nothing_leaves_a_terminal_state(current, new):
    with pytest.raises(InvalidTransitionError):
        check_transition(current, new)


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (TaskState.WORKING, TaskState.SUBMITTED),
        (TaskState.INPUT_REQUIRED, TaskState.INPUT_REQUIRED),
        (TaskState.INPUT_REQUIRED, TaskState.COMPLETED),
    ],
)
def test_forbidden(current, new):
    with pytest.raises(InvalidTransitionError):
        check_transition(current, new)
