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

The bindings themselves live in `rest_v10` (HTTP+JSON v1.0 under `/a2a/rest`) and `rest_v03` (HTTP+JSON
v0.3 under `/a2a/rest/v1`).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import errors, json_v03, protojson_v10, pushconfig
from app.protocol.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
)
from app.protocol.model import TaskState
from app.protocol.validation import snake

from .admission import http_headers
from .deps import components, owner_of
from .faults import unexpected
from .sanity import check_json

log = logging.getLogger(__name__)
router = APIRouter()

BODY_TYPES = frozenset({"application/json", "application/a2a+json"})


class UnsupportedMediaTypeError(InvalidRequestError):
    """A request body in a media type the REST bindings do not read: HTTP 415, else an invalid request."""

    http_status = 415


def error_name(err: A2AError) -> str:
    """The spec's name of the error: its nearest class among the A2A errors."""
    for cls in type(err).__mro__:
        if cls.__module__ == errors.__name__:
            return cls.__name__
    return "InternalError"


def rest_error(err: A2AError, status: int | None = None) -> Response:
    """The v0.3 REST error body both official 0.3 clients read: `code`, `type`, `message`.

    The Python client maps `type` to its error class, the JavaScript client maps `code`; `status` overrides
    the HTTP status (the v0.3 binding uses the a2a-python 0.3 table, the aliases the v1.0.1 one).
    """
    body = {"code": err.code, "type": error_name(err), "message": err.message}
    return Response(
        orjson.dumps(body),
        status_code=status or err.http_status,
        media_type="application/json",
        headers=http_headers(err),
    )


def media_type(header: str | None) -> str:
    return (header or "").split(";")[0].strip().lower()


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


@router.get("/a2a/tasks/{task_id}", include_in_schema=False)
async def get_task(task_id: str, request: Request) -> Response:
    try:
        history_length = _history_length(request)
        task = await components(request).service.get(owner_of(request), task_id, history_length)
    except A2AError as err:
        return rest_error(err)
    except Exception as exc:
        return rest_error(unexpected(exc, f"GET {request.url.path}"))
    return _json(json_v03.encode_task(task, history_length))


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
async def list_tasks(request: Request) -> Response:
    try:
        params = list_query(request)
        status = params.get("status")
        if isinstance(status, str) and status in TaskState._value2member_map_:
            params["status"] = protojson_v10.STATE_NAMES[TaskState(status)]
        q = protojson_v10.decode_list(params)
        page = await components(request).service.list(
            owner_of(request),
            context_id=q.context_id,
            state=q.status,
            after=q.status_timestamp_after,
            page_size=q.page_size,
            page_token=q.page_token,
            include_artifacts=q.include_artifacts,
            history_length=q.history_length,
        )
    except A2AError as err:
        return rest_error(err)
    except Exception as exc:
        return rest_error(unexpected(exc, "GET /a2a/tasks"))
    tasks = []
    for task in page.tasks:
        encoded = json_v03.encode_task(task, q.history_length)
        if not q.include_artifacts:
            del encoded["artifacts"]
        tasks.append(encoded)
    return _json(
        {"tasks": tasks, "nextPageToken": page.next_token, "pageSize": q.page_size, "totalSize": page.total}
    )


async def push_config(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    service = components(request).service
    owner = owner_of(request)
    try:
        if request.method == "POST":
            body = await read_json_body(request) or {}
            inner = body.get("pushNotificationConfig", body)
            cfg = pushconfig.decode(inner, "0.3", "body")
            return _json(pushconfig.encode_v03(await service.set_push_config(owner, task_id, cfg)))
        configs, _ = await service.list_push_configs(owner, task_id)
    except A2AError as err:
        return rest_error(err)
    except Exception as exc:
        return rest_error(unexpected(exc, f"{request.method} {request.url.path}"))
    return _json([pushconfig.encode_v03(c) for c in configs])


router.add_route(
    "/a2a/tasks/{task_id}/pushNotificationConfig",
    push_config,
    methods=["GET", "POST"],
    include_in_schema=False,
)
