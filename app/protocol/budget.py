"""Budgets: what a task may spend (its cap, `metadata.budgetUsd`) and what a principal may spend in a UTC day.

A task's cap is the lower of its role's (`budget_usd`, BUDGET_TASK_USD) and the one its first message asks
for (`metadata.budgetUsd`, checked at the edge by `task_options.TaskLimits`); a child's is also at most what
its parent has left. The new task keeps it in its metadata, so every writer of the task (a replica, the
replica writing for a remote worker, the worker itself) reads the same cap: `tasks/step.py` ends the task
`failed` (`over_budget`'s text) in the step whose usage passes it, its own reports and its ended children's
summed (`spent`). The day's cap is checked before a send is stored (`api/ops/admission.py`), with the day's
spend read from the usage rows (`store/usage.py`), and refused with `day_spent`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import RateLimitedError
from .usage import CHILDREN_KEY, USAGE_KEY

BUDGET_KEY = "budgetUsd"
"""A task's cap in USD, in its first message's metadata (asked) and in its own (kept)."""


def is_amount(value: Any) -> bool:
    """A JSON number of dollars above 0 (not a boolean, not NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an integer too large for a float
        return False


def cap_of(metadata: Mapping[str, Any] | None) -> float | None:
    """The cap a task keeps in its metadata (None: none)."""
    value = (metadata or {}).get(BUDGET_KEY)
    return float(value) if is_amount(value) else None


def lowest(*caps: float | None) -> float | None:
    """The lowest of the caps that are set (None: none is)."""
    set_ = [c for c in caps if c is not None]
    return min(set_) if set_ else None


def spent(metadata: Mapping[str, Any] | None) -> float:
    """What a task has spent: its own reports' known cost and its ended children's (`metadata.usage`)."""
    usage = (metadata or {}).get(USAGE_KEY)
    if not isinstance(usage, Mapping):
        return 0.0
    children = usage.get(CHILDREN_KEY)
    total = _cost(usage) + (_cost(children) if isinstance(children, Mapping) else 0.0)
    return round(total, 10)


def _cost(summary: Mapping[str, Any]) -> float:
    cost = summary.get("costUsd")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else 0.0


def over_budget(metadata: Mapping[str, Any] | None) -> str | None:
    """The status text of a task whose spend passed its cap; None while it has not (or has no cap)."""
    cap = cap_of(metadata)
    if cap is None:
        return None
    total = spent(metadata)
    if total <= cap:
        return None
    return (
        f"Budget exceeded: this task spent {usd(total)} against its budget of {usd(cap)} "
        "(metadata.budgetUsd); the agent was stopped."
    )


def left(metadata: Mapping[str, Any] | None) -> float | None:
    """What a task may still spend (None: no cap); a child it starts gets at most this."""
    cap = cap_of(metadata)
    return None if cap is None else max(cap - spent(metadata), 0.0)


def usd(amount: float) -> str:
    """An amount as the messages show it: `$0.06`, or more digits for a smaller one."""
    return f"${amount:.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"


def day_of(now: datetime) -> str:
    """The UTC day a usage row counts in (`YYYY-MM-DD`)."""
    return now.astimezone(UTC).date().isoformat()


def day_reset(now: datetime) -> datetime:
    """When the UTC day of `now` ends: the next midnight, UTC."""
    day = now.astimezone(UTC).date()
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)


def day_spent(owner_spent: float, cap: float, now: datetime) -> RateLimitedError:
    """The refusal of a send while the principal's spend today has reached the day's cap: -32092, HTTP 429
    with `Retry-After` the seconds to the next UTC midnight."""
    resets = day_reset(now)
    wait = max(1, math.ceil((resets - now).total_seconds()))
    at = resets.strftime("%Y-%m-%dT%H:%M:%SZ")
    return RateLimitedError(
        f"The daily budget is spent: {usd(owner_spent)} of {usd(cap)} today (BUDGET_DAY_USD, UTC day); "
        f"it resets at {at}, in {wait} s",
        {"retryAfter": wait, "resetsAt": at, "spentUsd": round(owner_spent, 6), "budgetUsd": cap},
    )


async def check_day(
    day_cost: Callable[[str, str], Awaitable[float]], owner: str, cap: float, now: datetime | None = None
) -> None:
    """Raise `day_spent` when `owner`'s spend on the UTC day of `now` (`day_cost(owner, day)`, the usage rows'
    sum) has reached `cap`: a client's send (`api/ops/admission.py`) and a run's new child (`runner/calls.py`)
    both meet it."""
    now = now or datetime.now(UTC)
    spent_today = await day_cost(owner, day_of(now))
    if spent_today >= cap:
        raise day_spent(spent_today, cap, now)
