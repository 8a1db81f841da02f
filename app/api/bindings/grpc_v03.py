"""The v0.3 gRPC service `a2a.v1.A2AService`: each RPC runs the v0.3 op with its `REST` wire (the v0.3
proto's ProtoJSON, which is what the v0.3 REST binding speaks too).

The v0.3 proto names tasks and configs by resource names (`tasks/{id}`,
`tasks/{id}/pushNotificationConfigs/{configId}`); the params here turn them into the ids the ops read, as
the REST binding's path does.
"""

from __future__ import annotations

import functools
from typing import Any

from a2a.compat.v0_3 import a2a_v0_3_pb2

from app.protocol.errors import InvalidParamsError

from ..ops import v03 as ops_v03
from .grpc_server import Service

TASKS = "tasks/"
CONFIGS = "/pushNotificationConfigs/"


def _task(name: Any, field: str) -> str:
    if not isinstance(name, str) or not name.startswith(TASKS) or "/" in name[len(TASKS) :]:
        raise InvalidParamsError(f"Invalid params: {field} must be tasks/{{id}}", {field: str(name)[:200]})
    return name[len(TASKS) :]


def _task_params(params: dict[str, Any]) -> dict[str, Any]:
    """`{name: "tasks/{id}", historyLength?}` → `{id, historyLength?}` (a 0 history length is unset)."""
    out: dict[str, Any] = {"id": _task(params.get("name"), "name")}
    if params.get("historyLength"):
        out["historyLength"] = params["historyLength"]
    return out


def _parent_params(params: dict[str, Any]) -> dict[str, Any]:
    return {"id": _task(params.get("parent"), "parent")}


def _config_params(params: dict[str, Any]) -> dict[str, Any]:
    """`{name: "tasks/{id}/pushNotificationConfigs/{configId}"}` → `{id, pushNotificationConfigId}`."""
    name = params.get("name")
    task, sep, config = name.partition(CONFIGS) if isinstance(name, str) else ("", "", "")
    if not sep or not config or "/" in config:
        raise InvalidParamsError(
            "Invalid params: name must be tasks/{id}/pushNotificationConfigs/{configId}",
            {"name": str(name)[:200]},
        )
    return {"id": _task(task, "name"), "pushNotificationConfigId": config}


def _rest(handler: ops_v03.Handler) -> Any:
    return functools.partial(handler, wire=ops_v03.REST)


SERVICE = Service.of(
    a2a_v0_3_pb2.DESCRIPTOR.services_by_name["A2AService"],
    "0.3",
    {
        "SendMessage": _rest(ops_v03.send),
        "SendStreamingMessage": _rest(ops_v03.stream),
        "GetTask": (_rest(ops_v03.get), _task_params),
        "CancelTask": (_rest(ops_v03.cancel), _task_params),
        "TaskSubscription": (_rest(ops_v03.resubscribe), _task_params),
        "CreateTaskPushNotificationConfig": _rest(ops_v03.set_push),
        "GetTaskPushNotificationConfig": (_rest(ops_v03.get_push), _config_params),
        "ListTaskPushNotificationConfig": (_rest(ops_v03.list_push), _parent_params),
        "DeleteTaskPushNotificationConfig": (_rest(ops_v03.delete_push), _config_params),
        "GetAgentCard": ops_v03.agent_card,
    },
)
