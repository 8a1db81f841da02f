"""Usage reports (`app/protocol/usage.py`): their wire form, what is refused, and the task's sum."""

from __future__ import annotations

import pytest

from app.protocol.usage import (
    COST_MIXED,
    COST_PRICE_TABLE,
    COST_REPORTED,
    ModelUsage,
    Usage,
    UsageError,
    add_child,
    add_summaries,
    add_to_summary,
)


def test_a_report_round_trips_through_its_wire_form() -> None:
    usage = Usage(
        (
            ModelUsage("claude-opus-4-8", 24, 14, 3, 2, 0.00047, COST_REPORTED),
            ModelUsage("claude-haiku-4-5", 5, 1),
        ),
        wall_ms=1200,
        turns=2,
        tool_calls=1,
    )
    wire = usage.to_wire()
    assert wire == {
        "models": [
            {
                "model": "claude-opus-4-8",
                "inputTokens": 24,
                "outputTokens": 14,
                "cacheReadTokens": 3,
                "cacheWriteTokens": 2,
                "costUsd": 0.00047,
                "costSource": "reported",
            },
            {
                "model": "claude-haiku-4-5",
                "inputTokens": 5,
                "outputTokens": 1,
                "cacheReadTokens": 0,
                "cacheWriteTokens": 0,
                "costUsd": None,
            },
        ],
        "wallMs": 1200,
        "turns": 2,
        "toolCalls": 1,
    }
    assert Usage.from_wire(wire) == usage
    assert usage.tokens("input") == 29 and usage.cost_usd == 0.00047


def test_of_is_one_model_and_a_given_cost_is_reported() -> None:
    u = Usage.of("gpt-5", input_tokens=10, output_tokens=5, cost_usd=0.5, turns=1)
    assert u.models == (ModelUsage("gpt-5", 10, 5, 0, 0, 0.5, COST_REPORTED),)
    assert Usage.of("gpt-5").models[0].cost_source is None


def test_the_same_model_twice_is_one_entry() -> None:
    u = Usage.from_wire({"models": [{"model": "m", "inputTokens": 1}, {"model": "m", "inputTokens": 2}]})
    assert u.models == (ModelUsage("m", 3),)


@pytest.mark.parametrize(
    "wire",
    [
        [],
        {"models": {}},
        {"models": [{"model": "m", "inputTokens": -1}]},
        {"models": [{"model": "m", "inputTokens": 1.5}]},
        {"models": [{"model": "m", "inputTokens": "7"}]},
        {"models": [{"model": "m", "inputTokens": True}]},
        {"models": [{"model": "m", "costUsd": -0.1}]},
        {"models": [{"model": "m", "costUsd": float("inf")}]},
        {"models": [{"model": "m", "costSource": "guessed", "costUsd": 1}]},
        {"models": [{"model": 7}]},
        {"models": [{"model": "x" * 201}]},
        {"models": [{"model": str(i)} for i in range(17)]},
        {"models": [], "wallMs": 10**16},
        {"models": [], "turns": -2},
    ],
)
def test_what_is_not_a_report_is_refused(wire: object) -> None:
    with pytest.raises(UsageError):
        Usage.from_wire(wire)


def test_the_task_sum_adds_every_report_and_keeps_models_apart() -> None:
    first = Usage.of("a", input_tokens=10, output_tokens=5, cost_usd=0.01, wall_ms=100, turns=1, tool_calls=2)
    second = Usage(
        (
            ModelUsage("a", 1, 1, 4, 0, 0.002, COST_PRICE_TABLE),
            ModelUsage("b", 100, 10),
        ),
        wall_ms=50,
        tool_calls=1,
    )
    total = add_to_summary(add_to_summary(None, first), second)
    assert total == {
        "reports": 2,
        "inputTokens": 111,
        "outputTokens": 16,
        "cacheReadTokens": 4,
        "cacheWriteTokens": 0,
        "wallMs": 150,
        "turns": 1,
        "toolCalls": 3,
        "costUsd": 0.012,
        "models": {
            "a": {
                "inputTokens": 11,
                "outputTokens": 6,
                "cacheReadTokens": 4,
                "cacheWriteTokens": 0,
                "costUsd": 0.012,
                "costSource": COST_MIXED,
            },
            "b": {
                "inputTokens": 100,
                "outputTokens": 10,
                "cacheReadTokens": 0,
                "cacheWriteTokens": 0,
                "costUsd": None,
                "costSource": None,
            },
        },
    }


def test_a_sum_with_no_known_cost_has_none_and_a_damaged_sum_starts_again() -> None:
    assert add_to_summary(None, Usage.of("m", input_tokens=3))["costUsd"] is None
    damaged = {"reports": "two", "inputTokens": None, "models": [1]}
    assert add_to_summary(damaged, Usage.of("m", input_tokens=3))["inputTokens"] == 3


def test_defaults_fill_only_what_the_report_leaves_out() -> None:
    u = Usage.of("m", wall_ms=7).with_defaults(wall_ms=100, tool_calls=3)
    assert (u.wall_ms, u.tool_calls) == (7, 3)


def test_a_child_is_added_to_the_summary_once_and_its_own_reports_keep_it() -> None:
    own = add_to_summary(None, Usage.of("a", input_tokens=3, cost_usd=0.01))
    child = add_to_summary(None, Usage.of("a", input_tokens=10, output_tokens=2, cost_usd=0.02))
    summed = add_child(own, "c1", child)
    assert summed is not None
    assert summed["children"] == child and summed["childTasks"] == ["c1"]
    assert (summed["reports"], summed["inputTokens"], summed["costUsd"]) == (1, 3, 0.01)
    assert add_child(summed, "c1", child) is None
    later = add_to_summary(summed, Usage.of("b", input_tokens=1))
    assert later["children"] == child and later["childTasks"] == ["c1"] and later["inputTokens"] == 4
    two = add_child(later, "c2", child)
    assert two is not None
    assert (two["children"]["reports"], two["children"]["inputTokens"]) == (2, 20)
    assert two["children"]["models"]["a"]["costUsd"] == 0.04


def test_add_summaries_skips_what_is_not_a_summary() -> None:
    assert add_summaries(None, {"reports": "x", "models": {"m": {"inputTokens": -1}}}) == add_summaries(
        None, {}
    )
