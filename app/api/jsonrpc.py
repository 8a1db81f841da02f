"""JSON-RPC 2.0 at `POST /a2a/jsonrpc` (and `POST /a2a`): envelope rules, batches, notifications.

Errors ride in HTTP 200 with the spec's codes; the response id always equals the request's. Streaming
methods validate and store before the first byte, so their errors come back as ordinary responses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import v03
from app.protocol.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
)
from app.protocol.model import EventRecord
from app.tasks.service import Snapshot

from .deps import Components, components, owner_of
from .sse import sse_response

log = logging.getLogger(__name__)
router = APIRouter()

JSON_TYPES = {"application/json", "application/json-rpc", "application/a2a+json"}
_MISSING = object()

Handler = Callable[[Any, Components, str], Awaitable[Any]]


async def _send(params: Any, c: Components, owner: str) -> Any:
    message, config, push = v03.decode_send(params)
    if push is not None:
        raise PushNotificationNotSupportedError(
            "This agent does not support push notifications (capabilities.pushNotifications is false)"
        )
    task = await c.service.send(owner, message, config)
    return v03.encode_task(task, config.history_length)


async def _get(params: Any, c: Components, owner: str) -> Any:
    task_id, history_length = v03.decode_task_query(params)
    return v03.encode_task(await c.service.get(owner, task_id), history_length)


async def _cancel(params: Any, c: Components, owner: str) -> Any:
    task_id, _ = v03.decode_task_id(params)
    return v03.encode_task(await c.service.cancel(owner, task_id))


async def _push(params: Any, c: Components, owner: str) -> Any:
    raise PushNotificationNotSupportedError(
        "This agent does not support push notifications (capabilities.pushNotifications is false)"
    )


async def _extended_card(params: Any, c: Components, owner: str) -> Any:
    raise ExtendedAgentCardNotConfiguredError()


METHODS: dict[str, Handler] = {
    "message/send": _send,
    "tasks/get": _get,
    "tasks/cancel": _cancel,
    "tasks/pushNotificationConfig/set": _push,
    "tasks/pushNotificationConfig/get": _push,
    "tasks/pushNotificationConfig/list": _push,
    "tasks/pushNotificationConfig/delete": _push,
    "agent/getAuthenticatedExtendedCard": _extended_card,
}
STREAMING = {"message/stream", "tasks/resubscribe"}


def _error(rid: Any, err: A2AError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.data is not None:
        body["data"] = err.data
    return {"jsonrpc": "2.0", "id": rid, "error": body}


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _encoder(rid: Any, history_length: int | None = None) -> Callable[[Snapshot | EventRecord], Any]:
    def encode(item: Snapshot | EventRecord) -> Any:
        if isinstance(item, Snapshot):
            result = v03.encode_task(item.task, history_length)
        else:
            result = v03.encode_event(item.event)
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    return encode


def _last_event_id(request: Request, params: Any) -> int | None:
    """This server's resume cursor: `Last-Event-ID`, or `metadata.lastEventId` in the params."""
    raw = request.headers.get("last-event-id")
    if raw is None and isinstance(params, dict) and isinstance(params.get("metadata"), dict):
        raw = params["metadata"].get("lastEventId")
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidParamsError("Last-Event-ID must be an event sequence number") from None
    return max(value, 0)


async def _stream(request: Request, method: str, params: Any, rid: Any, c: Components) -> Response:
    owner = owner_of(request)
    if method == "message/stream":
        message, config, push = v03.decode_send(params)
        if push is not None:
            raise PushNotificationNotSupportedError()
        items = await c.service.stream(owner, message)
        encode = _encoder(rid, config.history_length)
    else:
        task_id, _ = v03.decode_task_id(params)
        items = await c.service.resubscribe(owner, task_id, _last_event_id(request, params))
        encode = _encoder(rid)
    return sse_response(items, encode, c.settings.sse_keepalive_s)


async def _one(request: Request, item: Any, c: Components, batched: bool) -> Any:
    """One request object → a response object, an SSE Response, or None for a notification."""
    if not isinstance(item, dict):
        return _error(None, InvalidRequestError("Each request must be a JSON object"))
    rid = item.get("id", _MISSING)
    notification = rid is _MISSING
    if notification:
        rid = None
    elif rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        return _error(None, InvalidRequestError("id must be a string, an integer or null"))
    if item.get("jsonrpc") != "2.0":
        return _error(rid, InvalidRequestError('jsonrpc must be exactly "2.0"'))
    method = item.get("method")
    if not isinstance(method, str) or not method:
        return _error(rid, InvalidRequestError("method must be a non-empty string"))
    params = item.get("params", {})
    if not isinstance(params, dict | list):
        return _error(rid, InvalidRequestError("params must be an object or an array"))
    try:
        if method in STREAMING:
            if batched:
                raise InvalidRequestError(f"{method} streams; it cannot be part of a batch")
            response = await _stream(request, method, params, rid, c)
            return None if notification else response
        handler = METHODS.get(method)
        if handler is None:
            raise MethodNotFoundError(f"Method {method} not found")
        result = await handler(params, c, owner_of(request))
    except A2AError as err:
        return None if notification else _error(rid, err)
    except Exception:
        log.exception("internal error in %s", method)
        return None if notification else _error(rid, InternalError())
    return None if notification else {"jsonrpc": "2.0", "id": rid, "result": result}


async def handle(request: Request) -> Response:
    c = components(request)
    ctype = request.headers.get("content-type")
    if ctype is not None and ctype.split(";")[0].strip().lower() not in JSON_TYPES:
        err = InvalidRequestError(
            f"Unsupported Content-Type {ctype.split(';')[0].strip()!r}; send application/json"
        )
        return _json(_error(None, err), status=415)
    try:
        payload = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _json(_error(None, JSONParseError()))
    if isinstance(payload, list):
        if not payload:
            return _json(_error(None, InvalidRequestError("A batch must not be empty")))
        results = await asyncio.gather(*(_one(request, it, c, True) for it in payload))
        out = [r for r in results if r is not None]
        return _json(out) if out else Response(status_code=204)
    result = await _one(request, payload, c, False)
    if result is None:
        return Response(status_code=204)
    if isinstance(result, Response):
        return result
    return _json(result)


# Plain Starlette routes: the handler reads the raw request itself, so FastAPI's dependency
# resolution would only add cost to the hottest path.
router.add_route("/a2a/jsonrpc", handle, methods=["POST"], include_in_schema=False)
router.add_route("/a2a", handle, methods=["POST"], include_in_schema=False)
