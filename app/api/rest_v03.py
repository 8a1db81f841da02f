"""The v0.3 HTTP+JSON (REST) binding under `/a2a/rest/v1`: the v0.3 gRPC proto's HTTP annotations.

| route | operation |
|---|---|
| `POST /v1/message:send` | SendMessage → `SendMessageResponse` (`{"task": ...}`) |
| `POST /v1/message:stream` | SendStreamingMessage → SSE of `StreamResponse` |
| `GET /v1/tasks/{id}` | GetTask (`?historyLength=`) → `Task` |
| `POST /v1/tasks/{id}:cancel` | CancelTask → `Task` |
| `GET` or `POST /v1/tasks/{id}:subscribe` | TaskSubscription → SSE of `StreamResponse` (1) |
| `POST /v1/tasks/{id}/pushNotificationConfigs` | CreateTaskPushNotificationConfig (2) |
| `GET /v1/tasks/{id}/pushNotificationConfigs` | ListTaskPushNotificationConfig → `{"configs": [...]}` |
| `GET`, `DELETE /v1/tasks/{id}/pushNotificationConfigs/{configId}` | Get / Delete (`{}`) a push config |
| `GET /v1/card` | GetAgentCard: the served card as the v0.3 proto's AgentCard |

(1) The task first, then its events until it ends; for a finished task, the task and the end of the stream
(as the proto says). `GET /v1/tasks` (no RPC in the v0.3 proto) answers UnsupportedOperation.
(2) The body is `CreateTaskPushNotificationConfigRequest` (`{parent, configId, config: {name,
pushNotificationConfig}}`, JSON or proto names), or just the `TaskPushNotificationConfig` or the config.
Configs come back as `{name: "tasks/{id}/pushNotificationConfigs/{configId}", pushNotificationConfig}`.

Payloads are ProtoJSON of the v0.3 proto (`protocol/protojson_v03.py`), not the JSON-RPC shapes. Official v0.3
clients append `/v1` to the interface URL themselves, so the card advertises `/a2a/rest` for both versions.
Errors are `{"code": <JSON-RPC code>, "type": "<ErrorClassName>", "message": ...}` (the Python client maps
`type`, the JavaScript client `code`), with the HTTP status a2a-python 0.3 used. A request without
`A2A-Version` is v0.3; an explicit other version is refused (-32009).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import protojson_v03, pushconfig
from app.protocol.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from app.protocol.model import Message
from app.tasks.service import Snapshot

from .admission import admit, open_stream
from .calls import Call, Item, Stream, last_event_id
from .faults import unexpected
from .rest import read_json_body, rest_error
from .sse import sse_response

log = logging.getLogger(__name__)
router = APIRouter()

PREFIX = "/a2a/rest/v1"

# The HTTP statuses of a2a-python 0.3's REST error handler (PROTOCOL-NOTES §4.2); others keep theirs.
V03_HTTP_STATUS: dict[type[A2AError], int] = {
    JSONParseError: 400,
    InvalidRequestError: 400,
    MethodNotFoundError: 404,
    TaskNotFoundError: 404,
    ExtendedAgentCardNotConfiguredError: 404,
    InvalidParamsError: 422,
    TaskNotCancelableError: 409,
    PushNotificationNotSupportedError: 501,
    UnsupportedOperationError: 501,
    ContentTypeNotSupportedError: 415,
    InvalidAgentResponseError: 502,
    InternalError: 500,
}


def v03_error(err: A2AError) -> Response:
    """The v0.3 error body with the 0.3 status; an error class with a status of its own keeps it."""
    status = err.http_status
    for cls in type(err).__mro__:
        if cls in V03_HTTP_STATUS:
            status = V03_HTTP_STATUS[cls]
            break
        if "http_status" in vars(cls):
            break
    return rest_error(err, status)


def v03_call(request: Request) -> Call:
    call = Call.of(request)
    if call.version != "0.3":
        raw = request.headers.get("a2a-version") or request.query_params.get("A2A-Version")
        raise VersionNotSupportedError(
            f"A2A-Version {raw} is not served here: this is the v0.3 HTTP+JSON binding "
            "(the v1.0 one is at /a2a/rest without /v1)",
            {"version": raw},
        )
    return call


def _task_encoder(history_length: int | None = None) -> Callable[[Item], Any]:
    def encode(item: Item) -> Any:
        if isinstance(item, Snapshot):
            return {"task": protojson_v03.encode_task(item.task, history_length)}
        if isinstance(item, Message):
            return {"message": protojson_v03.encode_message(item)}
        return protojson_v03.encode_event(item.event)

    return encode


# ---- operations: (request, call) → result object or stream ----------------------------------------


def _inline(push: dict[str, Any] | None) -> Any:
    return pushconfig.decode(push, "0.3", "configuration.pushNotification") if push is not None else None


async def send(request: Request, call: Call) -> Any:
    message, config, push = protojson_v03.decode_send(await read_json_body(request))
    webhook = _inline(push)
    result = await call.c.service.send(
        call.owner, await admit(message, call), config, webhook, call.idempotency_key
    )
    if isinstance(result, Message):
        return {"message": protojson_v03.encode_message(result)}
    return {"task": protojson_v03.encode_task(result, config.history_length)}


async def stream(request: Request, call: Call) -> Stream:
    message, config, push = protojson_v03.decode_send(await read_json_body(request))
    webhook = _inline(push)
    items = await call.c.service.stream(
        call.owner, await admit(message, call), webhook, config, call.idempotency_key
    )
    return items, _task_encoder(config.history_length)


async def get(request: Request, call: Call) -> Any:
    raw = request.query_params.get("historyLength")
    if raw is not None and not raw.isdigit():
        raise InvalidParamsError("historyLength must be a non-negative integer")
    history_length = int(raw) if raw is not None else None
    task = await call.c.service.get(call.owner, request.path_params["id"], history_length)
    return protojson_v03.encode_task(task, history_length)


async def cancel(request: Request, call: Call) -> Any:
    await read_json_body(request)  # CancelTaskRequest names the task in the path; the body adds nothing
    return protojson_v03.encode_task(await call.c.service.cancel(call.owner, request.path_params["id"]))


async def subscribe(request: Request, call: Call) -> Stream:
    """The task first, then its events until it ends; a finished task: the task, then the end."""
    body = await read_json_body(request)
    after = last_event_id(request, body)
    items = await call.c.service.resubscribe(call.owner, request.path_params["id"], after)
    return items, _task_encoder()


def _create_body(body: dict[str, Any] | None) -> dict[str, Any]:
    """The config of a create request, whichever of the accepted shapes it came in."""
    body = body or {}
    config_id = body.get("configId") or body.get("config_id")
    outer = body.get("config")
    if isinstance(outer, dict):
        body = outer
    inner = body.get("pushNotificationConfig", body.get("push_notification_config", body))
    if not isinstance(inner, dict):
        raise InvalidParamsError("Invalid body: config.pushNotificationConfig must be an object")
    if config_id and not inner.get("id"):
        inner = {**inner, "id": config_id}
    return inner


async def create_push(request: Request, call: Call) -> Any:
    task_id = request.path_params["id"]
    cfg = pushconfig.decode(_create_body(await read_json_body(request)), "0.3", "body")
    stored = await call.c.service.set_push_config(call.owner, task_id, cfg)
    return pushconfig.encode_v03_proto(stored)


async def list_push(request: Request, call: Call) -> Any:
    configs, _ = await call.c.service.list_push_configs(call.owner, request.path_params["id"])
    return {"configs": [pushconfig.encode_v03_proto(c) for c in configs]}


async def get_push(request: Request, call: Call) -> Any:
    p = request.path_params
    return pushconfig.encode_v03_proto(
        await call.c.service.get_push_config(call.owner, p["id"], p["config_id"])
    )


async def delete_push(request: Request, call: Call) -> Any:
    p = request.path_params
    await call.c.service.delete_push_config(call.owner, p["id"], p["config_id"])
    return {}


async def list_tasks(request: Request, call: Call) -> Any:
    raise UnsupportedOperationError(
        "ListTasks has no v0.3 binding; use GET /a2a/rest/tasks (v1.0) or GET /a2a/tasks"
    )


async def card(request: Request, call: Call) -> Any:
    """GetAgentCard: the authenticated extended card when one is configured, else the public one."""
    return protojson_v03.encode_card(orjson.loads((call.c.extended_card or call.c.card).hybrid.body))


# ---- endpoints ------------------------------------------------------------------------------------

Op = Callable[[Request, Call], Awaitable[Any]]
StreamOp = Callable[[Request, Call], Awaitable[Stream]]


def unary(op: Op) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await op(request, v03_call(request))
        except A2AError as err:
            return v03_error(err)
        except Exception as exc:
            return v03_error(unexpected(exc, f"{request.method} {request.url.path}"))
        return Response(orjson.dumps(result), media_type="application/json")

    return endpoint


def streaming(op: StreamOp) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            call = v03_call(request)
            items, encode = await open_stream(call, lambda: op(request, call))
        except A2AError as err:
            return v03_error(err)
        except Exception as exc:
            return v03_error(unexpected(exc, f"{request.method} {request.url.path}"))
        return sse_response(items, encode, call.c.settings.sse_keepalive_s)

    return endpoint


ROUTES: list[tuple[str, list[str], Callable[[Request], Awaitable[Response]]]] = [
    ("/message:send", ["POST"], unary(send)),
    ("/message:stream", ["POST"], streaming(stream)),
    ("/tasks", ["GET"], unary(list_tasks)),
    ("/tasks/{id}:cancel", ["POST"], unary(cancel)),
    ("/tasks/{id}:subscribe", ["GET", "POST"], streaming(subscribe)),
    ("/tasks/{id}", ["GET"], unary(get)),
    ("/tasks/{id}/pushNotificationConfigs", ["POST"], unary(create_push)),
    ("/tasks/{id}/pushNotificationConfigs", ["GET"], unary(list_push)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["GET"], unary(get_push)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["DELETE"], unary(delete_push)),
    ("/card", ["GET"], unary(card)),
]

for _path, _methods, _endpoint in ROUTES:
    router.add_route(PREFIX + _path, _endpoint, methods=_methods, include_in_schema=False)
