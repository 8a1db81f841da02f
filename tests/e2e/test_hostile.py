"""Hostile callers, one case each (issue #13.2), against real server processes.

- a JSON-RPC `method` that is a list or an object is -32600 on a kept connection;
- clients that leave a stream at any point (its last event included) leave no unread background-task
  exception and no traceback in the server's log;
- an error no endpoint catches is answered in the binding's error shape, on a kept connection;
- the catch-all middleware itself, for every binding's path.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, Router

from app.api.edge.fallback import Fallback
from tests.conftest import BACKENDS, make_server
from tests.support.rpc import text_message

V10 = {"A2A-Version": "1.0"}
NOT_STRINGS = [[], {}, [1], {"a": 1}]


def _addr(resp: httpx.Response) -> Any:
    return resp.extensions["network_stream"].get_extra_info("client_addr")


@pytest.mark.parametrize("method", NOT_STRINGS, ids=["[]", "{}", "[1]", "{a:1}"])
@pytest.mark.parametrize("headers", [{}, V10], ids=["v0.3", "v1.0"])
def test_method_that_is_not_a_string_is_an_invalid_request(server, method, headers) -> None:
    with httpx.Client(base_url=server.base_url, timeout=20, limits=httpx.Limits(max_connections=1)) as c:
        first = c.get("/healthz")
        resp = c.post("/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 7, "method": method}, headers=headers)
        assert resp.status_code == 200
        assert resp.json()["id"] == 7
        assert resp.json()["error"]["code"] == -32600
        batch = c.post("/a2a/jsonrpc", json=[{"jsonrpc": "2.0", "id": 8, "method": method}], headers=headers)
        assert [r["error"]["code"] for r in batch.json()] == [-32600]
        # The keep-alive connection is the same one all along.
        assert _addr(first) == _addr(resp) == _addr(batch) == _addr(c.get("/healthz"))


def _events(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def _leave_stream(client: httpx.AsyncClient, n: int) -> None:
    """Stream a short task and leave: at its last event, or after n events (never, for large n)."""
    rest = n % 2 == 1
    if rest:
        body: Any = {
            "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "say:a"}]}
        }
        url = "/a2a/rest/message:stream"
    else:
        body = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "message/stream",
            "params": {"message": text_message("say:a")},
        }
        url = "/a2a/jsonrpc"
    async with client.stream("POST", url, json=body) as resp:
        seen = 0
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            seen += 1
            event = orjson.loads(line[5:])
            event = event.get("result", event)
            update = event.get("statusUpdate", event)
            state = (update.get("status") or {}).get("state", "")
            if seen >= n % 5 or update.get("final") or state in ("completed", "TASK_STATE_COMPLETED"):
                return


@pytest.mark.parametrize("backend", BACKENDS)
async def test_clients_leaving_streams_leave_no_unread_task_exception(backend, tmp_path) -> None:
    """Hundreds of short streams on both bindings, each left by its client at its end or midway: the log
    has no "Task exception was never retrieved" (a read of the stream finished with StopAsyncIteration
    just as the client left) and no traceback."""
    srv = await make_server(backend, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            for round_ in range(8):
                await asyncio.gather(*(_leave_stream(client, round_ * 50 + i) for i in range(50)))
            # The server still serves streams to their end afterwards.
            resp = await client.post(
                "/a2a/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/stream",
                    "params": {"message": text_message("x")},
                },
            )
            assert _events(resp.text)[-1]["result"]["final"] is True
    finally:
        srv.stop()
    log = (tmp_path / "server.log").read_text()
    assert "never retrieved" not in log and "Traceback" not in log, log[-3000:]


async def _drop_tasks_table(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.split("///", 1)[1]) as conn:
            conn.execute("DROP TABLE tasks")
        return
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    await conn.execute("DROP TABLE tasks CASCADE")
    await conn.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_error_no_endpoint_catches_gets_the_binding_shape(backend, tmp_path) -> None:
    """An error nothing expected (the tasks table is gone) on the `/a2a/tasks` aliases: the answer is the
    v0.3 REST error body (no internals), logged with its cause, and the connection stays open."""
    srv = await make_server(backend, tmp_path)
    try:
        await _drop_tasks_table(srv.database_url)
        async with httpx.AsyncClient(
            base_url=srv.base_url, timeout=30, limits=httpx.Limits(max_connections=1)
        ) as client:
            first = await client.get("/healthz")
            resp = await client.get("/a2a/tasks/some-task")
            assert resp.status_code == 500
            assert resp.json() == {"code": -32603, "type": "InternalError", "message": "Internal error"}
            assert _addr(first) == _addr(resp) == _addr(await client.get("/healthz"))
    finally:
        srv.stop()
    log = (tmp_path / "server.log").read_text()
    assert "internal error in" in log, log[-3000:]
    assert "no such table" in log or "does not exist" in log, log[-3000:]
    assert "Exception in ASGI application" not in log  # answered, not re-raised to the server


# ---- the catch-all middleware on its own, for every binding's path ------------------------------------


async def _boom(request: Request) -> Response:
    raise RuntimeError("secret detail")


async def _boom_midway(request: Request) -> Response:
    async def body() -> Any:
        yield b"data: one\n\n"
        raise RuntimeError("secret detail")

    return StreamingResponse(body(), media_type="text/event-stream")


PATHS = [
    "/a2a/jsonrpc",
    "/a2a",
    "/a2a/rest/tasks/x",
    "/a2a/rest/acme/tasks/x",
    "/a2a/rest/v1/tasks/x",
    "/a2a/tasks/x",
    "/other",
]
# A bare router (no Starlette app around it, whose own error middleware would answer first).
fallback_app = Fallback(
    Router(
        routes=[
            *(Route(p, _boom, methods=["GET", "POST"]) for p in PATHS),
            Route("/a2a/rest/midway", _boom_midway, methods=["POST"]),
        ]
    )
)


async def _call(path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=fallback_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post(path, headers=headers or {})


@pytest.mark.parametrize("path", ["/a2a/jsonrpc", "/a2a"])
async def test_catch_all_on_jsonrpc_is_a_jsonrpc_error(path: str) -> None:
    resp = await _call(path)
    assert resp.status_code == 500
    assert resp.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32603, "message": "Internal error"},
    }
    v10 = (await _call(path, V10)).json()["error"]
    assert v10["code"] == -32603 and v10["data"][0]["reason"] == "INTERNAL"


@pytest.mark.parametrize("path", ["/a2a/rest/tasks/x", "/a2a/rest/acme/tasks/x", "/other"])
async def test_catch_all_on_v10_rest_is_a_google_rpc_status(path: str) -> None:
    resp = await _call(path)
    assert resp.status_code == 500
    err = resp.json()["error"]
    assert (err["code"], err["status"], err["message"]) == (500, "INTERNAL", "Internal error")
    assert err["details"][0]["reason"] == "INTERNAL"


@pytest.mark.parametrize("path", ["/a2a/rest/v1/tasks/x", "/a2a/tasks/x"])
async def test_catch_all_on_v03_rest_is_the_v03_body(path: str) -> None:
    resp = await _call(path)
    assert resp.status_code == 500
    assert resp.json() == {"code": -32603, "type": "InternalError", "message": "Internal error"}


async def test_catch_all_never_shows_internals() -> None:
    for path in PATHS:
        text = (await _call(path)).text
        assert "secret" not in text and "Traceback" not in text and "RuntimeError" not in text


async def test_catch_all_leaves_a_started_response_to_the_server() -> None:
    """After the first byte the status cannot change: the error goes on to the server, which ends the
    response (there is no well-formed answer left to give)."""
    with pytest.raises(RuntimeError, match="secret detail"):
        await _call("/a2a/rest/midway")
