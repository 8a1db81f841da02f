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

Each route builds the request message from path, query and body and calls the v0.3 operation handlers
(`ops/v03.py`) with their `REST` wire, as JSON-RPC calls them with theirs; `GET /v1/card` and `GET /v1/tasks`
are this binding's own (`ops_v03.agent_card` also answers gRPC's GetAgentCard). Payloads are ProtoJSON of the
v0.3 proto (`protocol/protojson_v03.py`), not the JSON-RPC shapes. Official v0.3 clients append `/v1` to the
interface URL themselves, so the card advertises `/a2a/rest` for both versions. Errors are `{"code": <JSON-RPC
code>, "type": "<ErrorClassName>", "message": ...}` (the Python client maps `type`, the JavaScript client
`code`), with the HTTP status a2a-python 0.3 used (`rest_v03_status`). A request without `A2A-Version` is
v0.3; an explicit other version is refused (-32009).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fastapi import APIRouter, Request, Response

from app.protocol.errors import (
    A2AError,
    InvalidParamsError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

from ..errors import rest_error
from ..ops import v03 as ops_v03
from ..ops.calls import Call
from ..versions import raw_version
from .rest import Endpoint, Params, RestBinding, read_json_body

log = logging.getLogger(__name__)
router = APIRouter()

PREFIX = "/a2a/rest/v1"


def v03_error(request: Request, err: A2AError) -> Response:
    """The v0.3 error body with the status a2a-python 0.3 answers the error with (`rest_v03_status`)."""
    return rest_error(err, err.rest_v03_status)


def v03_call(request: Request, discovery: bool = False) -> Call:
    call = Call.of(request, discovery=discovery)
    if call.version != "0.3":
        raw = raw_version(request)
        raise VersionNotSupportedError(
            f"A2A-Version {raw} is not served here: this is the v0.3 HTTP+JSON binding "
            "(the v1.0 one is at /a2a/rest without /v1)",
            {"version": raw},
        )
    return call


# ---- params: the request message from path, query and body -----------------------------------------


async def _body(request: Request) -> dict[str, Any]:
    return await read_json_body(request) or {}


async def _get_params(request: Request) -> dict[str, Any]:
    params: dict[str, Any] = {"id": request.path_params["id"]}
    raw = request.query_params.get("historyLength")
    if raw is not None:
        if not raw.isdigit():
            raise InvalidParamsError("historyLength must be a non-negative integer")
        params["historyLength"] = int(raw)
    return params


async def _id_params(request: Request) -> dict[str, Any]:
    """The task of the path; of the body (which names the task in the path too) only `metadata`, where a
    resume cursor may be."""
    body = await _body(request)
    params: dict[str, Any] = {"id": request.path_params["id"]}
    if isinstance(body.get("metadata"), dict):
        params["metadata"] = body["metadata"]
    return params


async def _create_push_params(request: Request) -> dict[str, Any]:
    """The body as a `CreateTaskPushNotificationConfigRequest`, its `parent` the task of the path."""
    return {**await _body(request), "parent": f"tasks/{request.path_params['id']}"}


async def _push_params(request: Request) -> dict[str, Any]:
    params = {"id": request.path_params["id"]}
    if "config_id" in request.path_params:
        params["pushNotificationConfigId"] = request.path_params["config_id"]
    return params


async def _none(request: Request) -> dict[str, Any]:
    return {}


# ---- this binding's own operations -----------------------------------------------------------------


async def _delete_push(params: Any, call: Call, wire: ops_v03.Wire) -> Any:
    await ops_v03.delete_push(params, call, wire)
    return {}


async def _list_tasks(params: Any, call: Call, wire: ops_v03.Wire) -> Any:
    raise UnsupportedOperationError(
        "ListTasks has no v0.3 binding; use GET /a2a/rest/tasks (v1.0) or GET /a2a/tasks"
    )


# ---- endpoints ------------------------------------------------------------------------------------


def _json(request: Request) -> str:
    return "application/json"


BINDING = RestBinding(v03_call, v03_error, _json)


def unary(handler: ops_v03.Handler, params: Params) -> Endpoint:
    return BINDING.unary(functools.partial(handler, wire=ops_v03.REST), params)


def streaming(handler: ops_v03.StreamHandler, params: Params) -> Endpoint:
    return BINDING.streaming(functools.partial(handler, wire=ops_v03.REST), params)


ROUTES: list[tuple[str, list[str], Endpoint]] = [
    ("/message:send", ["POST"], unary(ops_v03.send, _body)),
    ("/message:stream", ["POST"], streaming(ops_v03.stream, _body)),
    ("/tasks", ["GET"], unary(_list_tasks, _none)),
    ("/tasks/{id}:cancel", ["POST"], unary(ops_v03.cancel, _id_params)),
    ("/tasks/{id}:subscribe", ["GET", "POST"], streaming(ops_v03.resubscribe, _id_params)),
    ("/tasks/{id}", ["GET"], unary(ops_v03.get, _get_params)),
    ("/tasks/{id}/pushNotificationConfigs", ["POST"], unary(ops_v03.set_push, _create_push_params)),
    ("/tasks/{id}/pushNotificationConfigs", ["GET"], unary(ops_v03.list_push, _push_params)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["GET"], unary(ops_v03.get_push, _push_params)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["DELETE"], unary(_delete_push, _push_params)),
    ("/card", ["GET"], BINDING.unary(functools.partial(ops_v03.agent_card, wire=ops_v03.REST), _none, True)),
]

for _path, _methods, _endpoint in ROUTES:
    router.add_route(PREFIX + _path, _endpoint, methods=_methods, include_in_schema=False)
