"""What the ASGI layers of the edge share: they look at HTTP requests only."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpLayer:
    """An ASGI layer for HTTP requests (`http`); other scopes (the lifespan) pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError
