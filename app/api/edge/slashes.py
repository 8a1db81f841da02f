"""One trailing slash is the same route: `POST /a2a/jsonrpc/` is `POST /a2a/jsonrpc`.

Clients built on a base URL often post to `<interface url>/`. A redirect would not help them (most HTTP
clients do not follow a 307 for a POST), so the slash is dropped before routing, and the router never
redirects (`redirect_slashes=False`). Runs outermost, so authentication and CORS see the same path.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Receive, Scope, Send


class StripTrailingSlash:
    """Drop one trailing slash from every path but `/` itself, before anything else sees the path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The next layer's coroutine, for a scope without the slash (no frame of its own: `asgi.py`)."""
        if scope["type"] == "http":
            path: str = scope["path"]
            if len(path) > 1 and path.endswith("/"):
                scope = dict(scope)
                scope["path"] = path[:-1]
                raw: bytes | None = scope.get("raw_path")
                if raw is not None and raw.endswith(b"/"):
                    scope["raw_path"] = raw[:-1]
        return self.app(scope, receive, send)
