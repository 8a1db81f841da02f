"""The last resort for an error no endpoint answered: the binding's own error shape, the connection kept.

Starlette's handler for `Exception` answers and then re-raises, so uvicorn logs the error a second time and
closes the keep-alive connection. This middleware answers and stops there. The answer has the shape of the
binding the path belongs to: a JSON-RPC error object (`/a2a/jsonrpc`, `/a2a`), the v0.3 REST body
(`/a2a/rest/v1/...`, the `/a2a/tasks` aliases) or a `google.rpc.Status` (v1.0 REST and every other path).
Nothing internal goes to the client; the server log has the traceback.
"""

from __future__ import annotations

import logging

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.protocol.errors import A2AError, InternalError

from . import rest_v03, rest_v10
from .jsonrpc import error_info
from .limits import http_headers
from .rest import rest_error

log = logging.getLogger(__name__)

JSONRPC_PATHS = frozenset({"/a2a/jsonrpc", "/a2a"})
ALIASES = "/a2a/tasks"


def error_for(exc: Exception) -> A2AError:
    """The A2A error to answer for an exception no endpoint caught."""
    return exc if isinstance(exc, A2AError) else InternalError()


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def binding_error(request: Request, err: A2AError) -> Response:
    """`err` in the error shape of the binding that `request`'s path belongs to."""
    path = request.url.path.rstrip("/") or "/"
    if path in JSONRPC_PATHS:
        body: dict[str, object] = {"code": err.code, "message": err.message}
        if (request.headers.get("a2a-version") or "").strip().startswith("1"):
            body["data"] = [error_info(err)]
        payload = {"jsonrpc": "2.0", "id": None, "error": body}
        return Response(
            orjson.dumps(payload),
            status_code=err.http_status,
            media_type="application/json",
            headers=http_headers(err),
        )
    if _under(path, rest_v03.PREFIX):
        return rest_v03.v03_error(err)
    if _under(path, ALIASES):
        return rest_error(err)
    return rest_v10.status_error(request, err)


class Fallback:
    """Answer an exception that escaped every endpoint, unless the response had already started.

    A stream that fails after its first byte cannot change its status: that exception is re-raised, and
    the server ends the response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            request = Request(scope, receive)
            await binding_error(request, error_for(exc))(scope, receive, send)
