"""-32603: a failure the client did not cause is reported without internals, and changes nothing."""

from __future__ import annotations

import sqlite3

import asyncpg
import httpx
import pytest

from tests.conftest import BACKENDS, make_server
from tests.support.rpc import call, send, send_request


async def _drop_events_table(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.split("///", 1)[1])
        conn.execute("DROP TABLE events")
        conn.commit()
        conn.close()
        return
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    await conn.execute("DROP TABLE events")
    await conn.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_database_failure_is_internal_error_without_details(backend, tmp_path):
    srv = await make_server(backend, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            done = await send(client, "say:before")
            await _drop_events_table(srv.database_url)
            broken = send_request("say:x", messageId="m-broken")
            body = await call(client, "message/send", broken["params"])
            assert body["error"] == {"code": -32603, "message": "Internal error"}
            text = str(body).lower()
            assert "traceback" not in text and "events" not in text and "sql" not in text
            # Reads still work and the failed send left no task behind.
            again = await call(client, "tasks/get", {"id": done["id"]})
            assert again["result"]["status"]["state"] == "completed"
            resp = await client.post("/a2a/jsonrpc", json=broken)
            assert resp.json()["error"]["code"] == -32603
    finally:
        srv.stop()
