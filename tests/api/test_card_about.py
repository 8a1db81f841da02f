"""Who runs the agent and where to read about it: the card's `provider`, `documentationUrl` and `iconUrl`
come from the settings (CARD_PROVIDER_ORGANIZATION with CARD_PROVIDER_URL, CARD_DOCUMENTATION_URL,
CARD_ICON_URL), in both card variants and in the v0.3 proto's card; unset, the card has none of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from app.agents.echo import EchoAgent
from app.api.card import build as card
from app.api.card.options import CardOptions
from app.protocol import protojson_v03
from app.settings import Settings

ABOUT = {
    "card_provider_organization": "Acme Tools",
    "card_provider_url": "https://acme.example",
    "card_documentation_url": "https://acme.example/docs/agent",
    "card_icon_url": "https://acme.example/agent.png",
}


def built(**settings: str) -> card.Card:
    options = CardOptions.from_settings(Settings(_env_file=None, port=41242, grpc_port=0, **settings))
    return card.build_card(options, EchoAgent(), datetime(2026, 1, 1, tzinfo=UTC))


def test_the_card_names_its_provider_documentation_and_icon_from_the_settings() -> None:
    c = built(**ABOUT)
    hybrid, v10 = json.loads(c.hybrid.body), json.loads(c.v10.body)
    for body in (hybrid, v10, protojson_v03.encode_card(hybrid)):
        assert body["provider"] == {"organization": "Acme Tools", "url": "https://acme.example"}
        assert body["documentationUrl"] == "https://acme.example/docs/agent"
        assert body["iconUrl"] == "https://acme.example/agent.png"


def test_unset_the_card_has_none_of_them() -> None:
    body = json.loads(built().hybrid.body)
    assert not {"provider", "documentationUrl", "iconUrl"} & set(body)


@pytest.mark.parametrize(
    "settings",
    [
        {"card_provider_organization": "Acme Tools"},
        {"card_provider_url": "https://acme.example"},
        {**ABOUT, "card_icon_url": "acme.example/agent.png"},
        {**ABOUT, "card_documentation_url": "ftp://acme.example/docs"},
    ],
    ids=["organization alone", "url alone", "icon not a URL", "docs not http"],
)
def test_a_half_provider_or_a_url_that_is_not_one_stops_start_up(settings: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, **settings)
