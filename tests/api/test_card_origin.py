"""With no PUBLIC_URL, the card names the loopback origin it was fetched through (`Card.at`): a client that
insists on interfaces sharing the card's origin (Google ADK's RemoteA2aAgent) takes the card whichever
loopback name it was given. Any other Host, or a PUBLIC_URL, gets the configured card."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from app.agents.echo import EchoAgent
from app.api.card import build as card
from app.api.card.options import CardOptions
from app.settings import Settings

BUILT = datetime(2026, 1, 1, tzinfo=UTC)


def options_for(**kw: Any) -> CardOptions:
    """The card options of the settings `kw` (PORT 41242, no gRPC unless given)."""
    return CardOptions.from_settings(Settings(_env_file=None, **{"port": 41242, "grpc_port": 0, **kw}))


def urls(c: card.Card) -> list[str]:
    body = json.loads(c.hybrid.body)
    return [body["url"]] + [i["url"] for i in body["supportedInterfaces"] + body["additionalInterfaces"]]


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:41242", "http://127.0.0.1:41242"),
        ("127.0.0.1", "http://127.0.0.1"),
        ("127.8.9.10:8080", "http://127.8.9.10:8080"),
        ("[::1]:41242", "http://[::1]:41242"),
        ("LOCALHOST:9000", "http://localhost:9000"),
    ],
)
def test_a_loopback_host_is_the_cards_origin(host: str, origin: str) -> None:
    c = card.build_card(options_for(), EchoAgent(), BUILT).at(host)
    assert {u.removesuffix("/a2a/jsonrpc").removesuffix("/a2a/rest") for u in urls(c)} == {origin}
    v10 = json.loads(c.v10.body)
    assert {i["url"].rsplit("/a2a/", 1)[0] for i in v10["supportedInterfaces"]} == {origin}


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "localhost:41242",
        "agents.example.com",
        "10.0.0.1:41242",
        "localhost.evil.example",
        "user@127.0.0.1",
        "127.0.0.1/path",
        "127.0.0.1:notaport",
        "127.0.0.1:99999",
    ],
)
def test_any_other_host_gets_the_default_card(host: str | None) -> None:
    default = card.build_card(options_for(), EchoAgent(), BUILT)
    assert default.at(host) is default
    assert set(urls(default)) == {"http://localhost:41242/a2a/jsonrpc", "http://localhost:41242/a2a/rest"}


def test_a_public_url_is_never_followed() -> None:
    c = card.build_card(options_for(public_url="https://agents.example.com"), EchoAgent(), BUILT)
    assert c.at("127.0.0.1:41242") is c
    assert urls(c)[0] == "https://agents.example.com/a2a/jsonrpc"


def test_grpc_follows_the_origins_host_unless_its_address_is_given() -> None:
    def grpc(c: card.Card) -> set[str]:
        body = json.loads(c.hybrid.body)
        return {i["url"] for i in body["supportedInterfaces"] if i["protocolBinding"] == "GRPC"}

    followed = card.build_card(options_for(grpc_port=50051), EchoAgent(), BUILT)
    assert grpc(followed) == {"localhost:50051"}
    assert grpc(followed.at("127.0.0.1:41242")) == {"127.0.0.1:50051"}
    assert grpc(followed.at("[::1]:41242")) == {"[::1]:50051"}
    given = card.build_card(
        options_for(grpc_port=50051, grpc_public_address="grpc.example.com:443"), EchoAgent(), BUILT
    )
    assert grpc(given.at("127.0.0.1:41242")) == {"grpc.example.com:443"}


def test_each_origin_is_built_once_and_their_number_is_bounded() -> None:
    default = card.build_card(options_for(), EchoAgent(), BUILT)
    first = default.at("127.0.0.1:41242")
    assert default.at("127.0.0.1:41242") is first, "cached"
    assert first.at("127.0.0.1:41242") is first
    assert first.hybrid.etag != default.hybrid.etag, "each origin's body has its own ETag"
    for i in range(2, card.MAX_ORIGINS + 5):
        default.at(f"127.0.0.{i}:41242")
    assert len(default._at) == card.MAX_ORIGINS
    assert default.at("127.0.0.200:41242") is default, "past the bound: the default card"
    assert default.at("127.0.0.1:41242") is first
