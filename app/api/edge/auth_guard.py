"""The ASGI layers in front of every route: CORS (but not for the card), body size, authentication.

Authentication runs here, before any route, so no route can forget it; only the agent card, the
health checks, the metrics and the console's page and assets (not its API) are public. A refused request
is answered in the error shape of the route it aimed at: a JSON-RPC error on the JSON-RPC endpoints, the
v0.3 REST body under `/a2a/rest/v1` and the `/a2a/tasks` aliases, a `google.rpc.Status` everywhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from urllib.parse import unquote_to_bytes

import orjson
from fastapi import Request, Response
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.protocol.errors import A2AError, PayloadTooLargeError, PermissionDeniedError, UnauthenticatedError
from app.telemetry import logs

from ..errors import http_headers, jsonrpc_error, rest_error, status_error
from ..paths import CARD_PATHS, CHECKPOINT_PATH, JSONRPC_PATHS, WORKER_PATHS, is_public, route_path
from ..sanity import NUL, nul_error
from ..versions import raw_version
from .auth import PRINCIPAL_KEY, Authenticator, challenge

log = logging.getLogger(__name__)

CORS_HEADERS = [
    "Authorization",
    "X-API-Key",
    "Content-Type",
    "A2A-Version",
    "A2A-Extensions",
    "X-A2A-Extensions",
    "Last-Event-ID",
    "Idempotency-Key",
    "MCP-Protocol-Version",
]


def error_response(scope: Scope, err: A2AError) -> Response:
    """`err` in the error shape of the route the request aimed at, with its HTTP status and headers."""
    request = Request(scope)
    path = route_path(scope["path"])
    extra = http_headers(err)
    if isinstance(err, UnauthenticatedError) or err.http_status == 403:
        extra["WWW-Authenticate"] = challenge(err)  # type: ignore[arg-type]
    if path in JSONRPC_PATHS:
        v10 = raw_version(request).startswith("1")
        resp: Response = Response(
            orjson.dumps(jsonrpc_error(None, err, v10)), err.http_status, media_type="application/json"
        )
    elif path.startswith(("/a2a/rest/v1/", "/a2a/tasks")):
        resp = rest_error(err)
    else:
        resp = status_error(request, err)
    resp.headers.update(extra)
    return resp


class Guard:
    """A NUL in the path or query, body size, then the caller's credential; the principal goes into the
    scope for `owner_of`. A worker's checkpoint upload has its own bound (`checkpoint_body_bytes`, from
    CHECKPOINT_MAX_MB), which its endpoint checks again for the task's store."""

    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, max_body_bytes: int, checkpoint_body_bytes: int = 0
    ) -> None:
        self.app = app
        self.auth = authenticator
        self.max_body = max_body_bytes
        self.checkpoint_body = checkpoint_body_bytes

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http" or is_public(scope["path"]):
            return self.app(scope, receive, send)  # no frame of its own (`asgi.py`)
        return self._guard(scope, receive, send)

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        if NUL in scope["path"] or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            await self._refuse(scope, receive, send, nul_error())
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        limit = self._limit(scope)
        if length is not None and (not length.isdigit() or int(length) > limit):
            await self._refuse(scope, receive, send, self._too_large(limit))
            return
        try:
            if scope["path"].startswith(WORKER_PATHS):
                principal = await self.auth.authenticate_worker(headers)
            else:
                principal = await self.auth.authenticate(headers)
                if principal.worker:
                    raise PermissionDeniedError("A worker credential may call only the worker endpoints")
        except A2AError as err:
            await self._refuse(scope, receive, send, err)
            return
        scope[PRINCIPAL_KEY] = principal
        logs.bind(principal=principal.name)
        if length is None and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            body = await self._bounded_body(receive, limit)
            if body is None:
                await self._refuse(scope, receive, send, self._too_large(limit))
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _limit(self, scope: Scope) -> int:
        """The largest body this request may carry."""
        if scope["method"] == "PUT" and CHECKPOINT_PATH.match(scope["path"]):
            return max(self.max_body, self.checkpoint_body)
        return self.max_body

    def _too_large(self, limit: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(f"The request body exceeds {limit} bytes", {"maxBytes": limit})

    async def _bounded_body(self, receive: Receive, limit: int) -> bytes | None:
        """A chunked body read whole, or None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, err: A2AError) -> None:
        await error_response(scope, err)(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the buffered body over once, then waits on the real one (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class CorsExceptCard:
    """CORS for the API routes with the configured origins; the card keeps its own `*`."""

    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=CORS_HEADERS,
            expose_headers=[
                "WWW-Authenticate",
                "Retry-After",
                "Content-Type",
                "A2A-Extensions",
                "X-A2A-Extensions",
            ],
            max_age=600,
        )

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and route_path(scope["path"]) in CARD_PATHS:
            return self.app(scope, receive, send)
        return self.cors(scope, receive, send)
