"""A role's URLs do not depend on its place in `AGENTS`: the same two roles in either order, each app in
process (its lifespan run, httpx over ASGI), answer at the same `/agents/{role}/` endpoints with cards naming
them; only the root alias follows the first role. The auth guard's public paths hold under every role's
prefix, the default role's included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.api.paths import is_public
from app.main import create_app
from app.settings import Settings
from tests.conftest import migrated_database_url

REVIEWER = {"adapter": "echo", "card": {"name": "Reviewer", "skills": [{"id": "review", "name": "Review"}]}}
BUILDER = {"adapter": "scripted", "card": {"name": "Builder", "skills": [{"id": "build", "name": "Build"}]}}
ORDERS = {"reviewer-first": {"reviewer": REVIEWER, "builder": BUILDER}}
ORDERS["builder-first"] = dict(reversed(ORDERS["reviewer-first"].items()))


@asynccontextmanager
async def app_client(tmp: Path, agents: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    url = await migrated_database_url("sqlite", tmp)
    settings = Settings(
        _env_file=None, database_url=url, redis_url=None, grpc_port=0, auth_mode="off", agents=agents
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as c:
            yield c


async def what_each_role_advertises(c: httpx.AsyncClient) -> dict[str, Any]:
    """Per role: its card's name and the paths of its interfaces; and the root card's name."""
    seen: dict[str, Any] = {}
    for role in ("reviewer", "builder"):
        card = await c.get(f"/agents/{role}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        assert card.status_code == 200, (role, card.text)
        body = card.json()
        seen[role] = (body["name"], sorted(urlsplit(i["url"]).path for i in body["supportedInterfaces"]))
        sent = await c.post(
            f"/agents/{role}/a2a/jsonrpc",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message",
                        "messageId": f"m-{role}",
                        "role": "user",
                        "parts": [{"kind": "text", "text": "hi"}],
                    }
                },
            },
        )
        assert sent.json()["result"]["status"]["state"] == "completed", sent.text
    seen["root"] = (await c.get("/.well-known/agent-card.json")).json()["name"]
    return seen


async def test_reordering_agents_changes_no_roles_urls(tmp_path: Path):
    got = {}
    for name, agents in ORDERS.items():
        async with app_client(tmp_path / name, agents) as c:
            got[name] = await what_each_role_advertises(c)
    first, second = got["reviewer-first"], got["builder-first"]
    for role in ("reviewer", "builder"):
        assert first[role] == second[role], role
        assert first[role][1] and all(p.startswith(f"/agents/{role}/") for p in first[role][1]), first[role]
    # Only the root alias moves: it is the first role's.
    assert (first["root"], second["root"]) == ("Reviewer", "Builder")


@pytest.mark.parametrize("role", ["default", "reviewer", "builder"])
def test_the_card_is_public_under_every_roles_prefix(role: str):
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        assert is_public(f"/agents/{role}{path}")
    assert not is_public(f"/agents/{role}/a2a/jsonrpc")
