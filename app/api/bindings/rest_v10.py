"""The v1.0 HTTP+JSON (REST) binding under `/a2a/rest`, each route also under `/a2a/rest/{tenant}/...`.

| route | operation |
|---|---|
| `POST /message:send` | SendMessage → `SendMessageResponse` |
| `POST /message:stream` | SendStreamingMessage → SSE of `StreamResponse` |
| `GET /tasks` | ListTasks (1) → `ListTasksResponse` |
| `GET /tasks/{id}` | GetTask (`?historyLength=`) → `Task` |
| `POST /tasks/{id}:cancel` | CancelTask → `Task` |
| `GET` or `POST /tasks/{id}:subscribe` | SubscribeToTask → SSE of `StreamResponse` |
| `POST /tasks/{id}/pushNotificationConfigs` | CreateTaskPushNotificationConfig (body: the flat config) |
| `GET /tasks/{id}/pushNotificationConfigs` | ListTaskPushNotificationConfigs (`?pageSize=&pageToken=`) |
| `GET`, `DELETE /tasks/{id}/pushNotificationConfigs/{configId}` | Get / Delete (`{}`) a push config |
| `GET /extendedAgentCard` | GetExtendedAgentCard (when configured) |

(1) Query: `contextId`, `status` (`TASK_STATE_*` or its number), `pageSize`, `pageToken`, `historyLength`,
`statusTimestampAfter` (ISO 8601), `includeArtifacts` (`true`/`false`).

The request message is built from the path, the query string and the JSON body (each field under its JSON
or its proto name, as ProtoJSON parsers read them), then the v1.0 operation handlers (`ops/v10.py`) run it,
exactly as for JSON-RPC. These routes speak v1.0 whatever the request says, so `A2A-Version` may be left
out; an explicit version other than 1.x is refused (-32009). Bodies are read as `application/a2a+json` or
`application/json`; answers (errors too) are `application/a2a+json` when the request names it in `Accept`
or was sent as it, `application/json` otherwise. Streams carry the bare `StreamResponse` in each
`data:`. Errors are `google.rpc.Status` bodies with the v1.0.1 HTTP status and a `google.rpc.ErrorInfo`
in `details`. The tenant `v1` is taken by the v0.3 binding (`rest_v03`), which is registered first.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request, Response

from app.protocol.errors import (
    VersionNotSupportedError,
)

from ..card.build import card_response
from ..errors import response_media, status_error
from ..ops import v10 as ops_v10
from ..ops.calls import Call
from ..versions import raw_version
from .rest import Endpoint, RestBinding, error_path, list_query, query_fields, read_json_body

log = logging.getLogger(__name__)
router = APIRouter()

PREFIX = "/a2a/rest"


def v10_call(request: Request, discovery: bool = False) -> Call:
    """The call, as v1.0: no version or any 1.x is fine, another explicit version is refused."""
    call = Call.of(request, discovery=discovery)
    raw = raw_version(request)
    if raw and call.version != "1.0":
        raise VersionNotSupportedError(
            f"A2A-Version {raw} is not served here: this is the v1.0 HTTP+JSON binding "
            "(the v0.3 one is under /v1)",
            {"version": raw},
        )
    call.version = "1.0"
    return call


def _with_tenant(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    tenant = request.path_params.get("tenant")
    if tenant is not None:
        params["tenant"] = tenant
    return params


async def _body(request: Request) -> dict[str, Any]:
    return _with_tenant(request, await read_json_body(request) or {})


async def _body_with_id(request: Request) -> dict[str, Any]:
    """The body (optional) with the task id of the path, which wins over any id in the body."""
    params = await _body(request)
    params["id"] = request.path_params["id"]
    return params


async def _get_params(request: Request) -> dict[str, Any]:
    params = query_fields(request, ("historyLength",))
    params["id"] = request.path_params["id"]
    return _with_tenant(request, params)


async def _list_params(request: Request) -> dict[str, Any]:
    return _with_tenant(request, list_query(request))


async def _push_create_params(request: Request) -> dict[str, Any]:
    """The flat config from the body, for the task of the path."""
    params = await _body(request)
    params.pop("task_id", None)
    params["taskId"] = request.path_params["id"]
    return params


async def _push_ref_params(request: Request) -> dict[str, Any]:
    params = query_fields(request, ("pageSize", "pageToken"))
    params["taskId"] = request.path_params["id"]
    if "config_id" in request.path_params:
        params["id"] = request.path_params["config_id"]
    return _with_tenant(request, params)


async def _delete_push(params: Any, call: Call) -> Any:
    await ops_v10.delete_push(params, call)
    return {}


@error_path(status_error)
async def _extended_card(request: Request) -> Response:
    """GetExtendedAgentCard: the card variant for the request's A2A-Version, with its ETag (private)."""
    return card_response(
        request, ops_v10.extended(v10_call(request, discovery=True)), response_media(request), public=False
    )


BINDING = RestBinding(v10_call, status_error, response_media)
unary, streaming = BINDING.unary, BINDING.streaming

ROUTES: list[tuple[str, list[str], Endpoint]] = [
    ("/message:send", ["POST"], unary(ops_v10.send, _body)),
    ("/message:stream", ["POST"], streaming(ops_v10.stream, _body)),
    ("/tasks", ["GET"], unary(ops_v10.list_tasks, _list_params)),
    # `:cancel` and `:subscribe` before `/tasks/{id}`, whose `{id}` would take them in.
    ("/tasks/{id}:cancel", ["POST"], unary(ops_v10.cancel, _body_with_id)),
    ("/tasks/{id}:subscribe", ["GET", "POST"], streaming(ops_v10.subscribe, _body_with_id)),
    ("/tasks/{id}", ["GET"], unary(ops_v10.get, _get_params)),
    ("/tasks/{id}/pushNotificationConfigs", ["POST"], unary(ops_v10.create_push, _push_create_params)),
    ("/tasks/{id}/pushNotificationConfigs", ["GET"], unary(ops_v10.list_push, _push_ref_params)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["GET"], unary(ops_v10.get_push, _push_ref_params)),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["DELETE"], unary(_delete_push, _push_ref_params)),
    ("/extendedAgentCard", ["GET"], _extended_card),
]

# Plain Starlette routes, as for JSON-RPC: each endpoint reads the request itself. The tenant forms come
# after all the others, so that `/tasks/...` is never read as a tenant named `tasks`.
for _prefix in (PREFIX, PREFIX + "/{tenant}"):
    for _path, _methods, _endpoint in ROUTES:
        router.add_route(_prefix + _path, _endpoint, methods=_methods, include_in_schema=False)
