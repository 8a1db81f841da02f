"""JSON-RPC 2.0 at `POST /a2a/jsonrpc` (and `POST /a2a`), for v0.3 and v1.0 on the same endpoint.

Method names pick the version: `message/send`-style names are v0.3, PascalCase names are v1.0 and need
`A2A-Version: 1.x`. Errors ride in HTTP 200 with the spec's codes (v1.0 errors carry a google.rpc.ErrorInfo
in `data`); the response id always equals the request's. Streaming methods validate and store before the
first byte; an error found then is an ordinary response for v1.0 (as a2a-python answers it) and, as
v0.3 §3.3.1 wants, an event stream of that one response for v0.3.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope, Send

from app.protocol.errors import (
    A2AError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
)

from ..edge.asgi import HttpLayer
from ..errors import http_headers, jsonrpc_error
from ..faults import unexpected
from ..ops import v03 as ops_v03, v10 as ops_v10
from ..ops.admission import open_stream
from ..ops.calls import DISCOVERY, Call
from ..paths import JSONRPC_PATHS
from ..sanity import check_json
from ..versions import raw_version
from .sse import SseResponse, sse_once

log = logging.getLogger(__name__)
router = APIRouter()

JSON_TYPES = {"application/json", "application/json-rpc", "application/a2a+json"}
_MISSING = object()
LIMITED_KEY = "a2a.limited"


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


async def _one(request: Request, item: Any, batched: bool, header_v10: bool) -> Any:
    """One request object → a response object, an SSE Response, or None for a notification."""
    if not isinstance(item, dict):
        return jsonrpc_error(None, InvalidRequestError("Each request must be a JSON object"), header_v10)
    rid = item.get("id", _MISSING)
    notification = rid is _MISSING
    if notification:
        rid = None
    elif rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        return jsonrpc_error(None, InvalidRequestError("id must be a string, an integer or null"), header_v10)
    method = item.get("method")
    # Only a string can name a method: anything else (a list, an object) is never looked up.
    v10 = header_v10 or (
        isinstance(method, str) and (method in ops_v10.METHODS or method in ops_v10.STREAMING)
    )
    if item.get("jsonrpc") != "2.0":
        return jsonrpc_error(rid, InvalidRequestError('jsonrpc must be exactly "2.0"'), v10)
    if not isinstance(method, str) or not method:
        return jsonrpc_error(rid, InvalidRequestError("method must be a non-empty string"), v10)
    params = item.get("params", {})
    if not isinstance(params, dict | list):
        return jsonrpc_error(rid, InvalidRequestError("params must be an object or an array"), v10)
    try:
        call = Call.of(request, discovery=method in DISCOVERY)
        if method in ops_v10.METHODS or method in ops_v10.STREAMING:
            if call.version != "1.0":
                raise VersionNotSupportedError(
                    f"{method} is a v1.0 method; send the header A2A-Version: 1.0", {"version": call.version}
                )
            table, streams = ops_v10.METHODS, ops_v10.STREAMING
        else:
            table, streams = ops_v03.METHODS, ops_v03.STREAMING
        if method in streams:
            if batched:
                raise InvalidRequestError(f"{method} streams; it cannot be part of a batch")
            items, encode = await open_stream(call, lambda: streams[method](params, call))
            if notification:
                await items.aclose()  # type: ignore[attr-defined]
                return None
            return SseResponse(
                items,
                lambda it: {"jsonrpc": "2.0", "id": rid, "result": encode(it)},
                call.c.sse_keepalive_s,
            )
        handler = table.get(method)
        if handler is None:
            raise MethodNotFoundError(f"Method {method} not found")
        result = await handler(params, call)
    except A2AError as err:
        if err.http_status in (429, 503) and not batched:
            # A limit or an outage is an HTTP matter too: 429 or 503 (with Retry-After) tells any client or
            # proxy to back off.
            request.scope[LIMITED_KEY] = err
        return None if notification else jsonrpc_error(rid, err, v10)
    except Exception as exc:
        err = unexpected(exc, str(method))
        if err.http_status == 503 and not batched:
            request.scope[LIMITED_KEY] = err
        return None if notification else jsonrpc_error(rid, err, v10)
    return None if notification else {"jsonrpc": "2.0", "id": rid, "result": result}


async def handle(request: Request) -> Response:
    header_v10 = raw_version(request).startswith("1")
    ctype = request.headers.get("content-type")
    if ctype is not None and ctype.split(";")[0].strip().lower() not in JSON_TYPES:
        err = InvalidRequestError(
            f"Unsupported Content-Type {ctype.split(';')[0].strip()!r}; send application/json"
        )
        return _json(jsonrpc_error(None, err, header_v10), status=415)
    try:
        payload = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _json(jsonrpc_error(None, JSONParseError(), header_v10))
    try:
        check_json(payload)
    except InvalidRequestError as err:
        return _json(jsonrpc_error(None, err, header_v10))
    if isinstance(payload, list):
        if not payload:
            return _json(jsonrpc_error(None, InvalidRequestError("A batch must not be empty"), header_v10))
        results = await asyncio.gather(*(_one(request, it, True, header_v10) for it in payload))
        out = [r for r in results if r is not None]
        return _json(out) if out else Response(status_code=204)
    result = await _one(request, payload, False, header_v10)
    if result is None:
        return Response(status_code=204)
    if isinstance(result, Response):
        return result
    limited = request.scope.get(LIMITED_KEY)
    method = payload.get("method") if isinstance(payload, dict) else None
    if limited is None and isinstance(method, str) and method in ops_v03.STREAMING:
        # v0.3 §3.3.1: a streaming method answers an event stream, even when all it has is an error.
        return sse_once(result)
    if limited is not None:
        return Response(
            orjson.dumps(result),
            status_code=limited.http_status,
            media_type="application/json",
            headers=http_headers(limited),
        )
    return _json(result)


# Plain Starlette routes: the handler reads the raw request itself, so FastAPI's dependency
# resolution would only add cost to the hottest path. On the root app `Lane` answers before the router.
for _path in JSONRPC_PATHS:
    router.add_route(_path, handle, methods=["POST"], include_in_schema=False)


class Lane(HttpLayer):
    """The innermost layer of the root app: a JSON-RPC POST there goes to `handle` at once.

    The router's own layers (FastAPI's dispatch through included routers, the exception and exit-stack
    middleware, the route's wrappers) took about 19 µs of a send, 5 % of its CPU at c=64, and do nothing
    for this handler: it needs no dependency, and raises nothing the app's exception handlers take. A role's
    calls (`/agents/{role}/a2a/jsonrpc`) and the paths' other methods still go through the routes above.
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "POST" and scope["path"] in JSONRPC_PATHS:
            response = await handle(Request(scope, receive))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
