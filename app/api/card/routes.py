"""The public agent card's routes: `GET` (and the CORS preflight) at `/.well-known/agent-card.json` and the
v0.3 alias `/.well-known/agent.json`, open to any origin. The card itself is built in `build.py`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..deps import components
from ..paths import CARD_PATH, LEGACY_CARD_PATH
from .build import card_response

router = APIRouter()

CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Max-Age": "86400",
}


async def get_card(request: Request) -> Response:
    response = card_response(request, components(request).card)
    response.headers.update(CORS)
    return response


async def card_preflight(request: Request) -> Response:
    return Response(status_code=204, headers=CORS)


for _path in (CARD_PATH, LEGACY_CARD_PATH):
    router.add_api_route(_path, get_card, methods=["GET"], include_in_schema=False)
    router.add_api_route(_path, card_preflight, methods=["OPTIONS"], include_in_schema=False)
