"""Small helpers for speaking v0.3 JSON-RPC to the server in tests."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import httpx

_ids = itertools.count(1)


def text_message(text: str, **fields: Any) -> dict[str, Any]:
    msg = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    msg.update(fields)
    return msg


def send_request(text: str, configuration: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A whole `message/send` request (id 1) of a text message (`fields` go into the message), for the tests
    that post it themselves: to another path, with their own headers, or to read the raw response."""
    params: dict[str, Any] = {"message": text_message(text, **fields)}
    if configuration is not None:
        params["configuration"] = configuration
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}


async def call(client: httpx.AsyncClient, method: str, params: Any = None, **extra: Any) -> dict:
    """Send one JSON-RPC request and return the whole response object (result or error).

    A streaming method's error before its first event comes as a stream of that one response (v0.3).
    """
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        body["params"] = params
    body.update(extra)
    resp = await client.post("/a2a/jsonrpc", json=body)
    assert resp.status_code == 200, resp.text
    if resp.headers["content-type"].startswith("text/event-stream"):
        (data,) = sse_data(resp.text)
    else:
        data = resp.json()
    assert data["id"] == body["id"]
    return data


def sse_data(text: str) -> list[Any]:
    """The JSON of each `data:` event of a whole event stream (one line of JSON per event)."""
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def result(client: httpx.AsyncClient, method: str, params: Any = None) -> Any:
    data = await call(client, method, params)
    assert "error" not in data, data
    return data["result"]


async def send(client: httpx.AsyncClient, text: str, **config: Any) -> dict[str, Any]:
    """`message/send` with a text message; `config` goes into configuration. Returns the task."""
    params: dict[str, Any] = {"message": text_message(text)}
    if config:
        params["configuration"] = config
    return await result(client, "message/send", params)


async def start_v10(
    base_url: str,
    text: str,
    headers: dict[str, str] | None = None,
    role_path: str = "",
    wait: bool = False,
    **message: Any,
) -> dict[str, Any]:
    """A task started as a v1.0 client does it (JSON-RPC `SendMessage`; `wait`: until it stops); its Task."""
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": text}],
                **message,
            },
            "configuration": {"returnImmediately": not wait},
        },
    }
    async with httpx.AsyncClient(timeout=30) as c:
        resp = await c.post(
            f"{base_url}{role_path}/a2a/jsonrpc", json=body, headers={**(headers or {}), "A2A-Version": "1.0"}
        )
    return resp.json()["result"]["task"]
