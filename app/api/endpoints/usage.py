"""`GET /usage`: what the caller's agent runs used (tokens, cost, wall time, turns, tool calls), summed per
context, role, model or day.

Authenticated like the API, and scoped to the caller as every task call is: the rows of `call.owner` only.
A principal named in CONSOLE_ADMINS may ask for another principal's (`owner=X`) or everyone's (`owner=*`);
anyone else naming another owner gets 403. The sums come from `task_usage` (`store/usage.py`, through
`Components.usage`), one row per usage report and model, written with the event carrying the report.

Query: `by` (`context`, `role`, `model`, `day`; default `day`), `since` and `until` (UTC days `YYYY-MM-DD`,
inclusive), `contextId`, `role`, `owner`, `limit` (groups, 1-1000, default 100). docs/protocol.md "Usage and
cost". For one owner the answer also holds `budget`: its spend today (UTC) against BUDGET_DAY_USD.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol.budget import day_of, day_reset
from app.protocol.errors import A2AError, InvalidParamsError, PermissionDeniedError
from app.protocol.model import utcnow

from ..deps import Components, components, owner_of
from ..errors import status_error
from ..faults import unexpected

router = APIRouter()

BY = ("context", "role", "model", "day")
ALL_OWNERS = "*"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def _day(params: Any, name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise InvalidParamsError(f"{name} must be a day, YYYY-MM-DD (UTC)") from None


def _limit(params: Any) -> int:
    value = params.get("limit")
    if value is None or value == "":
        return DEFAULT_LIMIT
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise InvalidParamsError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(value)


def whose(caller: str, asked: str | None, admins: frozenset[str]) -> str | None:
    """The owner whose rows the caller may sum (None: every owner): the caller's own unless an admin
    (CONSOLE_ADMINS) names another, or `*`."""
    if asked is None or asked == "" or asked == caller:
        return caller
    if caller not in admins:
        raise PermissionDeniedError("Only the principals in CONSOLE_ADMINS may see another principal's usage")
    return None if asked == ALL_OWNERS else asked


async def _day_budget(c: Components, owner: str) -> dict[str, Any]:
    """The owner's spend today (UTC) against BUDGET_DAY_USD (`dayBudgetUsd` null: no cap), and when the
    day resets."""
    now = utcnow()
    day = day_of(now)
    return {
        "day": day,
        "spentUsd": await c.usage.day_cost(owner, day) if c.usage is not None else 0.0,
        "dayBudgetUsd": c.day_budget_usd,
        "resetsAt": day_reset(now).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@router.get("/usage", include_in_schema=False)
async def usage(request: Request) -> Response:
    c = components(request)
    params = request.query_params
    try:
        caller = owner_of(request)
        by = params.get("by") or "day"
        if by not in BY:
            raise InvalidParamsError(f"by must be one of {', '.join(BY)}")
        owner = whose(caller, params.get("owner"), c.console_admins)
        since, until = _day(params, "since"), _day(params, "until")
        if since and until and since > until:
            raise InvalidParamsError("since must not be after until")
        context_id, role = params.get("contextId") or None, params.get("role") or None
        limit = _limit(params)
    except A2AError as err:
        return status_error(request, err)
    if c.usage is None:
        return status_error(request, unexpected(RuntimeError("no usage store"), "GET /usage"))
    try:
        groups, total, truncated = await c.usage.sums(
            by, limit, owner=owner, since=since, until=until, context_id=context_id, role=role
        )
        budget = None if owner is None else await _day_budget(c, owner)
    except Exception as exc:
        return status_error(request, unexpected(exc, "GET /usage"))
    body: dict[str, Any] = {
        "budget": budget,
        "by": by,
        "owner": ALL_OWNERS if owner is None else owner,
        "since": since,
        "until": until,
        "contextId": context_id,
        "role": role,
        "groups": groups,
        "truncated": truncated,
        "total": total,
    }
    return Response(orjson.dumps(body), media_type="application/json", headers={"Cache-Control": "no-store"})
