"""`CardOptions`: what every card is built from (`build.build_card`, `build.extended_skills`, the signer),
instead of the server's `Settings`: built once at start-up by `CardOptions.from_settings`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.options import from_attributes

from ..edge.auth import AuthOptions, AuthSettings
from .signing import SigningOptions


class CardSettings(AuthSettings, Protocol):
    """What `CardOptions.from_settings` reads of the server's settings (`settings.Settings`, not imported
    here): the card's and the signing's, the public addresses, and the auth ones for the schemes."""

    public_url: str
    grpc_port: int
    grpc_public_address: str
    card_compat: Literal["hybrid", "1.0"]
    card_max_age_s: int
    card_extensions: list[dict[str, Any]]
    extended_card_skills: list[dict[str, Any]]
    extended_card_file: str
    card_signing_key_file: str
    card_signing_kid: str
    card_signing_jku: str
    card_provider_organization: str
    card_provider_url: str
    card_documentation_url: str
    card_icon_url: str

    @property
    def follows_host(self) -> bool: ...
    @property
    def grpc_follows_host(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class CardOptions:
    """What every card is built from, once at start-up, instead of the server's settings: each field but
    the last two is the setting of its name."""

    public_url: str
    """PUBLIC_URL, or its default `http://localhost:$PORT`."""
    grpc_public_address: str
    """GRPC_PUBLIC_ADDRESS, or its default (PUBLIC_URL's host with GRPC_PORT); empty without gRPC."""
    grpc_port: int = 0
    """GRPC_PORT; 0: no gRPC interface."""
    follows_host: bool = False
    """No PUBLIC_URL was given: a card fetched through another loopback origin names that origin."""
    grpc_follows_host: bool = False
    """No GRPC_PUBLIC_ADDRESS was given: the gRPC host follows the card's origin."""
    card_compat: Literal["hybrid", "1.0"] = "hybrid"
    card_max_age_s: int = 300
    card_extensions: tuple[dict[str, Any], ...] = ()
    """Checked by the settings (`extension_entry`)."""
    extended_card_skills: tuple[dict[str, Any], ...] = ()
    """As given (`build.extended_skills` checks them)."""
    extended_card_file: str = ""
    card_provider_organization: str = ""
    card_provider_url: str = ""
    """With CARD_PROVIDER_ORGANIZATION, the card's `provider` (the settings check both or neither)."""
    card_documentation_url: str = ""
    card_icon_url: str = ""
    signing: SigningOptions = field(default_factory=SigningOptions)
    auth: AuthOptions = field(default_factory=AuthOptions)
    """The schemes the card declares (`security_fields`); AUTH_MODE=off serves no extended card."""

    @classmethod
    def from_settings(cls, settings: CardSettings, auth: AuthOptions | None = None) -> CardOptions:
        """The options of these settings; `auth`: the app's, when already built from them."""
        s = settings
        return from_attributes(
            cls,
            s,
            card_extensions=tuple(s.card_extensions),
            extended_card_skills=tuple(s.extended_card_skills),
            signing=SigningOptions(s.card_signing_key_file, s.card_signing_kid, s.card_signing_jku),
            auth=auth if auth is not None else AuthOptions.from_settings(s),
        )
