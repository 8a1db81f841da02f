"""A2A extensions: what a card declares, the check of a request against it, and the echo of what was
activated.

A client names the extensions it wants in the `A2A-Extensions` header (v1.0; v0.3 clients send
`X-A2A-Extensions`; gRPC: the `a2a-extensions` / `x-a2a-extensions` metadata), comma-separated URIs. The
server activates those its card declares (`Declared.activate`), refuses a call that does not name every
extension the card marks `required` (`ExtensionSupportRequiredError`: -32008, HTTP 400, gRPC
FAILED_PRECONDITION, the missing URIs in its data / ErrorInfo metadata `extensions`), hands the activated
ones to the agent (`Request.active_extensions`) and echoes them in the response: the `A2A-Extensions`
header (and `X-A2A-Extensions` when the request used that name) by `EchoExtensions`, gRPC initial metadata
by `grpc_server`. Discovery never needs an extension: the public card is not an operation, and the
extended card operations activate without the check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.protocol.errors import ExtensionSupportRequiredError

HEADER = "A2A-Extensions"
LEGACY_HEADER = "X-A2A-Extensions"
"""The v0.3 name (a2a-python 0.3 and @a2a-js/sdk's v0.3 transports send it)."""
ACTIVE_KEY = "a2a.extensions"
"""Where a call leaves the extensions it activated in the ASGI scope, for `EchoExtensions`."""
_NAMES = (HEADER.lower().encode(), LEGACY_HEADER.lower().encode())
_LEGACY = LEGACY_HEADER.lower().encode()


@dataclass(frozen=True, slots=True)
class Declared:
    """The extensions one card declares: their URIs, and those a request must name."""

    uris: frozenset[str] = frozenset()
    required: tuple[str, ...] = ()

    @classmethod
    def of(cls, extensions: Sequence[Mapping[str, Any]]) -> Declared:
        return cls(
            frozenset(e["uri"] for e in extensions), tuple(e["uri"] for e in extensions if e.get("required"))
        )

    def activate(self, requested: Iterable[str], discovery: bool = False) -> tuple[str, ...]:
        """The requested extensions this card declares, in the order asked; refused when a required one
        is missing (not for `discovery`: fetching a card never needs an extension)."""
        asked = dict.fromkeys(requested)
        if not discovery:
            missing = [uri for uri in self.required if uri not in asked]
            if missing:
                raise ExtensionSupportRequiredError(
                    f"This agent requires the extension{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)}: name {'them' if len(missing) > 1 else 'it'} in the "
                    f"{HEADER} header (gRPC: the a2a-extensions metadata)",
                    {"extensions": ",".join(missing)},
                )
        if not self.uris:
            return ()
        return tuple(uri for uri in asked if uri in self.uris)


def split(values: Iterable[str]) -> list[str]:
    """Extension URIs from header (or metadata) values, each comma-separated."""
    return [uri.strip() for v in values for uri in v.split(",") if uri.strip()]


def echo_metadata(active: Sequence[str], legacy: bool) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata that tells the client what was activated (under the v0.3 name too when the
    request used it)."""
    value = ",".join(active)
    names = (HEADER.lower(), LEGACY_HEADER.lower()) if legacy else (HEADER.lower(),)
    return tuple((name, value) for name in names)


class EchoExtensions:
    """Adds `A2A-Extensions` (and `X-A2A-Extensions` when asked under that name) to the response of a
    request whose call activated extensions. A request that names none passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http" or not any(k in _NAMES for k, _ in scope["headers"]):
            return self.app(scope, receive, send)  # no frame of its own (`asgi.py`)
        return self._echoing(scope, receive, send)

    async def _echoing(self, scope: Scope, receive: Receive, send: Send) -> None:
        legacy = any(k == _LEGACY for k, _ in scope["headers"])

        async def echo(message: Message) -> None:
            if message["type"] == "http.response.start":
                active = scope.get(ACTIVE_KEY)
                if active:
                    value = ",".join(active).encode()
                    headers = [*message.get("headers", ()), (_NAMES[0], value)]
                    if legacy:
                        headers.append((_LEGACY, value))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, echo)
