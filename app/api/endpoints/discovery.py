"""`GET /agents`: the agent instances live now, and the roles, each available or not (discovery).

Authenticated like the API (the guard lets only the card, health and metrics through). The listing comes from
the components' `Discovery` (`runner/discovery.py`): every instance of every process seen within
DISCOVERY_MAX_AGE_S, named `role:instance`. Clients send to a role's endpoints; instance names are for
looking, never for routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol.model import iso

from ..deps import components
from ..errors import status_error
from ..faults import unexpected
from ..paths import CARD_PATH

if TYPE_CHECKING:
    from app.store.instances import InstanceRecord

router = APIRouter()

ROUTING_NOTE = (
    "Send to a role's endpoints (its card URL); any instance of the role may run the task. "
    "Instance names are for discovery only."
)


def role_card_url(public_url: str, role: str, default_role: str | None) -> str:
    """A role's card, where no live instance names one: every replica serves every role's, the default
    role's at the root."""
    prefix = "" if role == default_role else f"/agents/{role}"
    return f"{public_url}{prefix}{CARD_PATH}"


def agent_entry(i: InstanceRecord) -> dict[str, Any]:
    return {
        **i.described(),
        "last_seen": iso(i.last_seen) if i.last_seen else None,
        "started_at": iso(i.started_at) if i.started_at else None,
        "free": i.free,
    }


def listing(instances: list[InstanceRecord], roles: Sequence[str], public_url: str) -> dict[str, Any]:
    """The answer: the live instances, then every role (configured first, in order, the default one first,
    then any other role a live instance runs), available when at least one instance of it is live."""
    default = roles[0] if roles else None
    by_role: dict[str, list[InstanceRecord]] = {}
    for i in instances:
        by_role.setdefault(i.role, []).append(i)
    names = list(dict.fromkeys([*roles, *sorted(by_role)]))
    return {
        "agents": [agent_entry(i) for i in instances],
        "roles": [
            {
                "role": role,
                "available": bool(by_role.get(role)),
                "instances": len(by_role.get(role, ())),
                "card_url": (
                    by_role[role][0].card_url
                    if by_role.get(role)
                    else role_card_url(public_url, role, default)
                ),
            }
            for role in names
        ],
        "routing_note": ROUTING_NOTE,
    }


@router.get("/agents", include_in_schema=False)
async def list_agents(request: Request) -> Response:
    c = components(request)
    roles = list(c.roles) or list(c.discovery.roles if c.discovery is not None else ())
    try:
        instances = await c.discovery.live() if c.discovery is not None else []
    except Exception as exc:
        return status_error(request, unexpected(exc, "GET /agents"))
    body = listing(instances, roles, c.public_url)
    return Response(orjson.dumps(body), media_type="application/json", headers={"Cache-Control": "no-store"})
