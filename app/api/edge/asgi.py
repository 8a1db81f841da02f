"""What the ASGI layers of the edge share: they look at HTTP requests only.

A layer's `__call__` is a plain function returning the next coroutine rather than a coroutine of its own:
awaited all the same, it adds no frame that an open stream would hold for its whole life (a frame a layer a
stream) and no coroutine to each request.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpLayer:
    """An ASGI layer for HTTP requests (`http`); other scopes (the lifespan) pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        return self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError
