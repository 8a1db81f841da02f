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

_PART = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "data": {},
        "url": {"type": "string"},
        "raw": {"type": "string"},
        "mediaType": {"type": "string"},
        "metadata": {"type": "object"},
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["messageId", "role", "parts"],
    "properties": {
        "messageId": {"type": "string"},
        "role": {"type": "string", "enum": ["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"]},
        "parts": {"type": "array", "items": _PART},
        "contextId": {"type": "string"},
        "taskId": {"type": "string"},
        "metadata": {"type": "object"},
        "extensions": {"type": "array", "items": {"type": "string"}},
        "referenceTaskIds": {"type": "array", "items": {"type": "string"}},
    },
}
_SEND = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "message": _MESSAGE,
        "configuration": {
            "type": "object",
            "properties": {
                "acceptedOutputModes": {"type": "array", "items": {"type": "string"}},
                "historyLength": {"type": "integer"},
                "blocking": {"type": "boolean"},
                "returnImmediately": {"type": "boolean"},
            },
        },
        "metadata": {"type": "object"},
    },
}
_V03_SEND = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "message": {
            "type": "object",
            "required": ["messageId", "role", "content"],
            "properties": {
                "messageId": {"type": "string"},
                "role": {"type": "string", "enum": ["ROLE_USER", "ROLE_AGENT"]},
                "content": {"type": "array", "items": _PART},
                "contextId": {"type": "string"},
                "taskId": {"type": "string"},
            },
        },
        "configuration": {"type": "object"},
        "metadata": {"type": "object"},
    },
}
_ERROR = {"description": "An error: google.rpc.Status (v1.0) or {code, type, message} (v0.3, aliases)"}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_CONFIG_ID = {"name": "config_id", "in": "path", "required": True, "schema": {"type": "string"}}
_HISTORY = {"name": "historyLength", "in": "query", "schema": {"type": "integer"}}
_LIST = [
    {"name": "contextId", "in": "query", "schema": {"type": "string"}},
    {"name": "status", "in": "query", "schema": {"type": "string"}},
    {"name": "pageSize", "in": "query", "schema": {"type": "integer"}},
    {"name": "pageToken", "in": "query", "schema": {"type": "string"}},
    _HISTORY,
    {"name": "statusTimestampAfter", "in": "query", "schema": {"type": "string"}},
    {"name": "includeArtifacts", "in": "query", "schema": {"type": "boolean"}},
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
            "post": _op(f"CreateTaskPushNotificationConfig ({v})", [_ID], {"type": "object"}),
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
