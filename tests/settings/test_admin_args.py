"""The admin command line's arguments: ages, times and states as an operator types them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.cli.admin import AdminError, parse_age, parse_since, parse_state
from app.protocol.model import TaskState, parse_iso, utcnow


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("30", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("1.5d", timedelta(hours=36)),
    ],
)
def test_ages(text, age):
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "soon", "-3d", "3y", "d"])
def test_not_ages(text):
    with pytest.raises(AdminError, match="not an age"):
        parse_age(text)


def test_since_is_an_age_ago_or_a_time():
    ago = parse_iso(parse_since("2h"))
    assert timedelta(hours=2) <= utcnow() - ago < timedelta(hours=2, minutes=1)
    assert parse_since("2026-11-30T10:00:00Z") == "2026-11-30T10:00:00.000Z"
    assert parse_since("2026-11-30T11:00:00+01:00") == "2026-11-30T10:00:00.000Z"
    with pytest.raises(AdminError, match="--since"):
        parse_since("yesterday")


@pytest.mark.parametrize(
    "text", ["input-required", "INPUT_REQUIRED", "input_required", "TASK_STATE_INPUT_REQUIRED"]
)
def test_states(text):
    assert parse_state(text) is TaskState.INPUT_REQUIRED


def test_not_a_state():
    with pytest.raises(AdminError, match="not a task state"):
        parse_state("sleeping")
