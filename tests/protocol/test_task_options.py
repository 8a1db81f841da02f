"""A task's own model and timeout against its role's limits (`app/protocol/task_options.py`): what is refused
and what the refusal names, what a later message may carry, and what a run reads back from its task."""

from __future__ import annotations

from typing import Any

import pytest

from app.protocol.errors import InvalidParamsError
from app.protocol.task_options import TaskLimits, chosen_model, kept_options, run_timeout

LIMITS = TaskLimits(("big", "small"), 60.0, "coder")


@pytest.mark.parametrize(
    "metadata",
    [{}, {"model": "small"}, {"model": "big"}, {"timeoutS": 60}, {"timeoutS": 0.5}, {"other": 1}],
)
def test_within_the_limits_passes(metadata: dict[str, Any]) -> None:
    LIMITS.check(metadata)


@pytest.mark.parametrize(
    ("metadata", "data"),
    [
        ({"model": "huge"}, {"field": "metadata.model", "allowedModels": "big,small"}),
        ({"model": None}, {"field": "metadata.model", "allowedModels": "big,small"}),
        ({"timeoutS": 60.01}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
        ({"timeoutS": -1}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
        ({"timeoutS": float("nan")}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
        ({"timeoutS": float("inf")}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
        ({"timeoutS": False}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
        ({"timeoutS": None}, {"field": "metadata.timeoutS", "maxTimeoutS": 60.0}),
    ],
)
def test_beyond_the_limits_is_32602_with_the_limit_in_its_data(metadata: dict[str, Any], data: dict) -> None:
    with pytest.raises(InvalidParamsError) as err:
        LIMITS.check(metadata)
    assert err.value.code == -32602 and err.value.data == data


def test_a_long_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(InvalidParamsError) as err:
        LIMITS.check({"model": "m" * 10_000})
    assert len(err.value.message) < 200 and "allows the models big, small" in err.value.message


def test_a_role_without_models_names_that_it_offers_no_choice() -> None:
    with pytest.raises(InvalidParamsError, match="the role 'solo' offers no choice of model"):
        TaskLimits((), 60.0, "solo").check({"model": "big"})


def test_a_later_message_may_repeat_the_tasks_options_but_not_change_them() -> None:
    kept = kept_options({"model": "small", "timeoutS": 30, "skill": "coding", "other": 1})
    assert kept == {"model": "small", "timeoutS": 30, "skill": "coding"}
    LIMITS.same(kept, {"model": "small", "timeoutS": 30})
    LIMITS.same(kept, {})
    with pytest.raises(InvalidParamsError, match="this task's is 'small'"):
        LIMITS.same(kept, {"model": "big"})
    with pytest.raises(InvalidParamsError, match="this task's is the role's own"):
        LIMITS.same({}, {"timeoutS": 10})


def test_a_run_reads_its_tasks_model_and_the_lower_of_the_two_timeouts() -> None:
    assert chosen_model({"model": "small"}) == "small" and chosen_model(None) is None
    assert run_timeout({"timeoutS": 5}, 60.0) == 5.0
    assert run_timeout({"timeoutS": 90}, 60.0) == 60.0, "a worker's own lower timeout still bounds the run"
    assert run_timeout({"timeoutS": True}, 60.0) == 60.0 and run_timeout(None, 60.0) == 60.0
