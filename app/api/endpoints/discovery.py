"""`GET /agents`: the agent instances live now, and the roles, each available or not (discovery).

Authenticated like the API (the guard lets only the card, health and metrics through). The listing comes from
the components' `Discovery` (`runner/discovery.py`): every instance of every process seen within
DISCOVERY_MAX_AGE_S, named `role:instance`. Clients send to a role's endpoints (`/agents/{role}/`, whatever
its place in AGENTS), or to the root ones with a skill a role declares (`metadata.skill`: each role's skills
are listed); instance names are for looking, never for routing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    "Send to a role's endpoints (its card URL), or to the root ones with metadata.skill naming a skill the "
    "role declares; any instance of the role may run the task. Instance names are for discovery only."
)


def role_card_url(public_url: str, role: str) -> str:
    """A role's card, where no live instance names one: every replica serves every role's under
    `/agents/{role}/`, the default role's too."""
    return f"{public_url}/agents/{role}{CARD_PATH}"


def agent_entry(i: InstanceRecord) -> dict[str, Any]:
    return {
        **i.described(),
        "last_seen": iso(i.last_seen) if i.last_seen else None,
        "started_at": iso(i.started_at) if i.started_at else None,
        "free": i.free,
    }


def listing(
    instances: list[InstanceRecord],
    roles: Sequence[str],
    public_url: str,
    skills: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The answer: the live instances, then every role (configured first, in order, the default one first,
    then any other role a live instance runs), available when at least one instance of it is live, with
    its skills (`skills` by role: its card's; a role not configured here: those its instances name)."""
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
                "default": role == default,
                "card_url": (
                    by_role[role][0].card_url if by_role.get(role) else role_card_url(public_url, role)
                ),
                "skills": (skills or {}).get(role) or _instance_skills(by_role.get(role, [])),
            }
            for role in names
        ],
        "routing_note": ROUTING_NOTE,
    }


def _instance_skills(instances: list[InstanceRecord]) -> list[dict[str, Any]]:
    ids = instances[0].capabilities.get("skills") if instances else None
    return [{"id": i} for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def role_skills(card_body: bytes) -> list[dict[str, Any]]:
    """A role's skills as its public card declares them (id, name, description, tags)."""
    keys = ("id", "name", "description", "tags")
    return [{k: s[k] for k in keys if k in s} for s in orjson.loads(card_body).get("skills", [])]


@router.get("/agents", include_in_schema=False)
async def list_agents(request: Request) -> Response:
    c = components(request)
    roles = list(c.roles) or list(c.discovery.roles if c.discovery is not None else ())
    try:
        instances = await c.discovery.live() if c.discovery is not None else []
    except Exception as exc:
        return status_error(request, unexpected(exc, "GET /agents"))
    skills = {name: role_skills(rc.card.hybrid.body) for name, rc in c.roles.items()}
    body = listing(instances, roles, c.public_url, skills)
    return Response(orjson.dumps(body), media_type="application/json", headers={"Cache-Control": "no-store"})
