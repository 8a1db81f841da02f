"""The last resort for an error no endpoint answered: the binding's own error shape, the connection kept.

Starlette's handler for `Exception` answers and then re-raises, so uvicorn logs the error a second time and
closes the keep-alive connection. This middleware answers and stops there, in the error shape of the route
the request aimed at (`auth_guard.error_response`: a JSON-RPC error object, the v0.3 REST body or a
`google.rpc.Status`); a database that is away is a 503 with `Retry-After` (`faults.unexpected`). Nothing
internal goes to the client; the server log has the traceback. The router's own refusals (no such route,
a route without that HTTP method) take the same shapes (`http_error`).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.protocol.errors import A2AError, InternalError, InvalidRequestError, MethodNotFoundError

from ..faults import unexpected
from .asgi import HttpLayer
from .auth_guard import error_response


class RouteNotFoundError(MethodNotFoundError):
    default_message = "No such route"


class MethodNotAllowedError(MethodNotFoundError):
    http_status = 405
    rest_v03_status = 405
    default_message = "This route does not take that HTTP method"


def http_error(request: Request, exc: HTTPException) -> Response:
    """A refusal by the router (404, 405, another 4xx) in the error shape of the route's binding."""
    err: A2AError
    if exc.status_code == 404:
        err = RouteNotFoundError()
    elif exc.status_code == 405:
        err = MethodNotAllowedError()
    elif exc.status_code < 500:
        err = InvalidRequestError(str(exc.detail))
    else:
        err = InternalError()
    resp = error_response(request.scope, err)
    resp.headers.update(exc.headers or {})
    return resp


class Fallback(HttpLayer):
    """Answer an exception that escaped every endpoint, unless the response had already started.

    A stream that fails after its first byte cannot change its status: that exception is re-raised, and
    the server ends the response.
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            where = f"{scope.get('method')} {scope.get('path')}"
            err = exc if isinstance(exc, A2AError) else unexpected(exc, where)
            await error_response(scope, err)(scope, receive, send)
