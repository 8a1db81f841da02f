"""An OpenAPI 3.1 description of the REST routes (`GET /a2a/rest/openapi.json`, authenticated).

The routes are plain Starlette endpoints that read the raw request, so FastAPI cannot describe them; this
document does, loosely (bodies are ProtoJSON of the A2A messages, see PROTOCOL-NOTES). It is what the
hostile-input tests hand to schemathesis, and a map for client authors.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

router = APIRouter()

_STRING = {"type": "string"}
_INTEGER = {"type": "integer"}
_BOOLEAN = {"type": "boolean"}
_OBJECT = {"type": "object"}
_STRINGS = {"type": "array", "items": _STRING}

_PART = {
    "type": "object",
    "properties": {
        "text": _STRING,
        "data": {},
        "url": _STRING,
        "raw": _STRING,
        "mediaType": _STRING,
        "metadata": _OBJECT,
    },
}


def _message(parts: str, roles: list[str], **more: Any) -> dict[str, Any]:
    """A Message: v1.0 holds its parts in `parts`, the v0.3 proto in `content`. Without `messageId` the server
    makes one; without `role` it is the user's (docs/protocol.md, "Accepted request shapes")."""
    return {
        "type": "object",
        "required": [parts],
        "properties": {
            "messageId": {**_STRING, "description": "made by the server when left out"},
            "role": {"type": "string", "enum": roles, "description": "the user's when left out"},
            parts: {"type": "array", "items": _PART},
            "contextId": _STRING,
            "taskId": _STRING,
            **more,
        },
    }


_MESSAGE = _message(
    "parts",
    ["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"],
    metadata=_OBJECT,
    extensions=_STRINGS,
    referenceTaskIds=_STRINGS,
)
_V03_MESSAGE = _message("content", ["ROLE_USER", "ROLE_AGENT"])
_SEND_CONFIG = {
    "type": "object",
    "properties": {
        "acceptedOutputModes": _STRINGS,
        "historyLength": _INTEGER,
        "blocking": _BOOLEAN,
        "returnImmediately": _BOOLEAN,
    },
}


def _send(message: dict[str, Any], configuration: dict[str, Any]) -> dict[str, Any]:
    """A SendMessageRequest body."""
    return {
        "type": "object",
        "required": ["message"],
        "properties": {"message": message, "configuration": configuration, "metadata": _OBJECT},
    }


_SEND = _send(_MESSAGE, _SEND_CONFIG)
_V03_SEND = _send(_V03_MESSAGE, _OBJECT)
_ERROR = {"description": "An error: google.rpc.Status (v1.0) or {code, type, message} (v0.3, aliases)"}
_ID = {"name": "id", "in": "path", "required": True, "schema": _STRING}
_CONFIG_ID = {"name": "config_id", "in": "path", "required": True, "schema": _STRING}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema}


_HISTORY = _query("historyLength", _INTEGER)
_LIST = [
    _query("contextId", _STRING),
    _query("status", _STRING),
    _query("pageSize", _INTEGER),
    _query("pageToken", _STRING),
    _HISTORY,
    _query("statusTimestampAfter", _STRING),
    _query("includeArtifacts", _BOOLEAN),
]


def _op(summary: str, params: list[dict[str, Any]] | None = None, body: Any = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": params or [],
        "responses": {"200": {"description": "OK"}, "default": _ERROR},
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


@lru_cache
def document() -> dict[str, Any]:
    """The OpenAPI document of the v1.0 and v0.3 REST bindings and the `/a2a/tasks` aliases."""
    paths: dict[str, Any] = {}
    for base, v in (("/a2a/rest", "v1.0"), ("/a2a/rest/v1", "v0.3")):
        send = _SEND if v == "v1.0" else _V03_SEND
        paths[f"{base}/message:send"] = {"post": _op(f"SendMessage ({v})", body=send)}
        paths[f"{base}/tasks/{{id}}"] = {"get": _op(f"GetTask ({v})", [_ID, _HISTORY])}
        paths[f"{base}/tasks/{{id}}:cancel"] = {"post": _op(f"CancelTask ({v})", [_ID])}
        paths[f"{base}/tasks/{{id}}/pushNotificationConfigs"] = {
            "get": _op(f"ListTaskPushNotificationConfigs ({v})", [_ID]),
            "post": _op(f"CreateTaskPushNotificationConfig ({v})", [_ID], _OBJECT),
        }
        paths[f"{base}/tasks/{{id}}/pushNotificationConfigs/{{config_id}}"] = {
            "get": _op(f"GetTaskPushNotificationConfig ({v})", [_ID, _CONFIG_ID]),
            "delete": _op(f"DeleteTaskPushNotificationConfig ({v})", [_ID, _CONFIG_ID]),
        }
    paths["/a2a/rest/tasks"] = {"get": _op("ListTasks (v1.0)", _LIST)}
    paths["/a2a/rest/extendedAgentCard"] = {"get": _op("GetExtendedAgentCard (v1.0)")}
    paths["/a2a/rest/v1/card"] = {"get": _op("GetAgentCard (v0.3)")}
    paths["/a2a/tasks"] = {"get": _op("ListTasks (alias, v0.3 shapes)", _LIST)}
    paths["/a2a/tasks/{id}"] = {"get": _op("GetTask (alias, v0.3 shapes)", [_ID, _HISTORY])}
    return {
        "openapi": "3.1.0",
        "info": {"title": "A2A coding-agent server: REST bindings", "version": "1"},
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "bearer": {"type": "http", "scheme": "bearer"},
            }
        },
        "security": [{"apiKey": []}, {"bearer": []}],
        "paths": paths,
    }


async def openapi(request: Request) -> Response:
    return Response(orjson.dumps(document()), media_type="application/json")


router.add_route("/a2a/rest/openapi.json", openapi, methods=["GET"], include_in_schema=False)
