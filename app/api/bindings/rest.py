"""REST aliases from the seed documents, and what the REST bindings share.

Aliases (version-neutral paths, v0.3 shapes, the v0.3 REST error body):

- `GET /a2a/tasks/{taskId}?historyLength=N`: the v0.3 Task (`tasks/get`).
- `GET /a2a/tasks`: ListTasks for REST clients, with the v1.0 query parameters (`contextId`, `status`,
  `pageSize`, `pageToken`, `historyLength`, `statusTimestampAfter`, `includeArtifacts`) and semantics
  (newest status first, cursor pages), v0.3 Task JSON in `{"tasks", "nextPageToken", "pageSize",
  "totalSize"}`; `status` takes `working` or `TASK_STATE_WORKING`.
- `POST /a2a/tasks/{taskId}/pushNotificationConfig`: add a webhook (body: the v0.3 `PushNotificationConfig`,
  or `{"pushNotificationConfig": ...}`) → the v0.3 `TaskPushNotificationConfig`, secrets redacted.
- `GET /a2a/tasks/{taskId}/pushNotificationConfig`: the task's webhooks, a bare array of those.

Each alias builds params and calls an operation handler (`ops/v03.py`, or `ops_v10.list_page` for ListTasks),
as the bindings do. The bindings themselves live in `rest_v10` (HTTP+JSON v1.0 under `/a2a/rest`) and
`rest_v03` (HTTP+JSON v0.3 under `/a2a/rest/v1`); what they share is here: `RestBinding` (a route's
`unary` or `streaming` endpoint), `error_path` (each binding's one error path), `read_json_body`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import json_v03, protojson_v10, pushconfig
from app.protocol.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
)
from app.protocol.model import PushConfig, TaskState
from app.protocol.validation import snake

from ..errors import media_type, rest_error
from ..faults import unexpected
from ..ops import v03 as ops_v03, v10 as ops_v10
from ..ops.admission import open_stream
from ..ops.calls import Call, Handler, StreamHandler
from ..sanity import check_json
from .sse import SseResponse

log = logging.getLogger(__name__)
router = APIRouter()

BODY_TYPES = frozenset({"application/json", "application/a2a+json"})


class UnsupportedMediaTypeError(InvalidRequestError):
    """A request body in a media type the REST bindings do not read: HTTP 415, else an invalid request."""

    http_status = 415
    rest_v03_status = 415


Endpoint = Callable[[Request], Awaitable[Response]]
ErrorAnswer = Callable[[Request, A2AError], Response]


def error_path(answer: ErrorAnswer) -> Callable[[Endpoint], Endpoint]:
    """A binding's one error path: an A2A error raised by its endpoint is answered by `answer`; any other
    exception first becomes the wire error `faults.unexpected` picks (a 503 for an outage, else -32603)."""

    def wrap(endpoint: Endpoint) -> Endpoint:
        @functools.wraps(endpoint)
        async def answered(request: Request) -> Response:
            try:
                return await endpoint(request)
            except A2AError as err:
                return answer(request, err)
            except Exception as exc:
                return answer(request, unexpected(exc, f"{request.method} {request.url.path}"))

        return answered

    return wrap


Params = Callable[[Request], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class RestBinding:
    """One HTTP+JSON binding (v0.3 or v1.0). Each route extracts the params (path, query, body) and an
    operation handler does the work, as for JSON-RPC; what differs is read here."""

    call_of: Callable[..., Call]
    """The call (`call_of(request, discovery=...)`), checked against the versions this binding speaks."""
    error: ErrorAnswer
    media: Callable[[Request], str]
    """The media type of an answer."""

    def unary(self, handler: Handler, params: Params, discovery: bool = False) -> Endpoint:
        """`discovery`: the route fetches a card, which never needs an extension."""

        @error_path(self.error)
        async def endpoint(request: Request) -> Response:
            call = self.call_of(request, discovery=discovery)
            result = await handler(await params(request), call)
            return Response(orjson.dumps(result), media_type=self.media(request))

        return endpoint

    def streaming(self, handler: StreamHandler, params: Params) -> Endpoint:
        """SSE of the handler's items; it validates and stores first, so its errors come back as HTTP."""

        @error_path(self.error)
        async def endpoint(request: Request) -> Response:
            call = self.call_of(request)
            args = await params(request)
            items, encode = await open_stream(call, lambda: handler(args, call))
            return SseResponse(items, encode, call.c.sse_keepalive_s)

        return endpoint


def _alias_error(request: Request, err: A2AError) -> Response:
    return rest_error(err)


alias = error_path(_alias_error)
"""The aliases' error path: the v0.3 REST body with the v1.0.1 HTTP status."""


async def read_json_body(request: Request) -> dict[str, Any] | None:
    """The request body as a JSON object; None when there is none.

    A body in another media type than JSON is refused (415) before any parsing; a missing Content-Type is
    read as JSON.
    """
    raw = await request.body()
    if not raw.strip():
        return None
    ctype = request.headers.get("content-type")
    if ctype is not None and media_type(ctype) not in BODY_TYPES:
        raise UnsupportedMediaTypeError(
            f"Unsupported Content-Type {media_type(ctype)!r}; send application/a2a+json or application/json",
            {"contentType": media_type(ctype)},
        )
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise JSONParseError("The request body is not valid JSON") from None
    check_json(body)
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object")
    return body


def _history_length(request: Request) -> int | None:
    raw = request.query_params.get("historyLength")
    if raw is None:
        return None
    if not raw.isdigit():
        raise InvalidParamsError("historyLength must be a non-negative integer")
    return int(raw)


def _json(payload: Any) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")


def _call(request: Request) -> Call:
    """The call of an alias: version-neutral paths, so `A2A-Version` is not read; answers are v0.3."""
    return Call.of(request, version="0.3")


@router.get("/a2a/tasks/{task_id}", include_in_schema=False)
@alias
async def get_task(request: Request) -> Response:
    params: dict[str, Any] = {"id": request.path_params["task_id"]}
    history_length = _history_length(request)
    if history_length is not None:
        params["historyLength"] = history_length
    return _json(await ops_v03.get(params, _call(request)))


LIST_QUERY = (
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
)


def query_fields(request: Request, names: tuple[str, ...]) -> dict[str, Any]:
    """The named request fields from the query string, under their JSON (camelCase) or proto (snake_case)
    names; the decoder reconciles the two and refuses both spellings with different values."""
    q = request.query_params
    return {k: q[k] for name in names for k in (name, snake(name)) if k in q}


def list_query(request: Request) -> dict[str, Any]:
    """ListTasks parameters from the query string (either field spelling; an enum by name or number)."""
    params = query_fields(request, LIST_QUERY)
    status = params.get("status")
    if isinstance(status, str) and status.isdigit():
        params["status"] = int(status)
    return params


@router.get("/a2a/tasks", include_in_schema=False)
@alias
async def list_tasks(request: Request) -> Response:
    """ListTasks with v1.0 semantics, v0.3 Task JSON; `status` also takes a v0.3 state name."""
    params = list_query(request)
    status = params.get("status")
    if isinstance(status, str) and status in TaskState._value2member_map_:
        params["status"] = protojson_v10.STATE_NAMES[TaskState(status)]
    q, page = await ops_v10.list_page(params, _call(request))
    tasks = []
    for task in page.tasks:
        encoded = json_v03.encode_task(task, q.history_length)
        if not q.include_artifacts:
            del encoded["artifacts"]
        tasks.append(encoded)
    return _json(
        {"tasks": tasks, "nextPageToken": page.next_token, "pageSize": q.page_size, "totalSize": page.total}
    )


def _decode_alias_push(params: dict[str, Any]) -> PushConfig:
    cfg = pushconfig.decode(params["pushNotificationConfig"], "0.3", "body")
    cfg.task_id = params["taskId"]
    return cfg


ALIAS_WIRE = dataclasses.replace(ops_v03.JSONRPC, decode_push_set=_decode_alias_push)
"""The v0.3 JSON-RPC shapes, but a config with errors named as the body's, which it is."""


@alias
async def push_config(request: Request) -> Response:
    """POST adds a webhook (the v0.3 config, bare or under `pushNotificationConfig`); GET lists them."""
    task_id = request.path_params["task_id"]
    if request.method == "POST":
        body = await read_json_body(request) or {}
        params = {"taskId": task_id, "pushNotificationConfig": body.get("pushNotificationConfig", body)}
        return _json(await ops_v03.set_push(params, _call(request), ALIAS_WIRE))
    return _json(await ops_v03.list_push({"id": task_id}, _call(request)))


router.add_route(
    "/a2a/tasks/{task_id}/pushNotificationConfig",
    push_config,
    methods=["GET", "POST"],
    include_in_schema=False,
)
