"""Limits on a real server, each with its own clear error and nothing stored: body size (413), parts and text
per message (-32602 / 400), history returned, new tasks per minute (429 + Retry-After), open streams per
principal (429); and CORS for the configured origins while the card keeps `*`."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.conftest import make_server
from tests.support.auth import api_keys_env, db_state, key_of
from tests.support.rpc import text_message

V10 = {"A2A-Version": "1.0"}
ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
async def limited(tmp_path_factory):
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("limits"),
        **api_keys_env(
            MAX_BODY_BYTES="4096",
            MAX_MESSAGE_PARTS="3",
            MAX_MESSAGE_TEXT_CHARS="100",
            MAX_HISTORY_LENGTH="2",
            TASK_RATE_PER_MIN="1",
            TASK_RATE_BURST="3",
            MAX_STREAMS_PER_PRINCIPAL="2",
            CORS_ORIGINS=f"{ORIGIN}, https://other.example",
        ),
    )
    yield srv
    srv.stop()


@pytest.fixture
async def bob(limited):
    async with httpx.AsyncClient(base_url=limited.base_url, headers=key_of("bob"), timeout=30) as c:
        yield c


def send_body(message: dict, method: str = "message/send") -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}


async def test_body_too_large_is_413_before_anything(limited, bob):
    before = await db_state(limited.database_url)
    big = send_body(text_message("x" * 5000))
    resp = await bob.post("/a2a/jsonrpc", json=big)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == -32093
    rest = await bob.post("/a2a/rest/message:send", json={"message": {"parts": [{"text": "x" * 5000}]}})
    assert rest.status_code == 413 and rest.json()["error"]["details"][0]["reason"] == "PAYLOAD_TOO_LARGE"

    async def chunked():
        for _ in range(10):
            yield b" " * 1000

    resp = await bob.post("/a2a/jsonrpc", content=chunked(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 413
    assert await db_state(limited.database_url) == before


async def test_a_small_chunked_body_still_works(bob):
    import orjson

    body = orjson.dumps(send_body(text_message("say:chunked")))

    async def chunked():
        yield body[:10]
        yield body[10:]

    resp = await bob.post("/a2a/jsonrpc", content=chunked(), headers={"Content-Type": "application/json"})
    assert resp.json()["result"]["status"]["state"] == "completed"


async def test_too_many_parts_or_too_much_text_is_invalid_params(limited, bob):
    before = await db_state(limited.database_url)
    parts = [{"kind": "text", "text": "a"}] * 4
    resp = await bob.post("/a2a/jsonrpc", json=send_body({**text_message("x"), "parts": parts}))
    assert resp.json()["error"]["code"] == -32602 and "at most 3 parts" in resp.json()["error"]["message"]
    resp = await bob.post("/a2a/jsonrpc", json=send_body(text_message("y" * 101)))
    assert resp.json()["error"]["code"] == -32602 and "100 characters" in resp.json()["error"]["message"]
    rest = await bob.post(
        "/a2a/rest/message:send",
        json={"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "z" * 101}]}},
    )
    assert rest.status_code == 400 and rest.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert await db_state(limited.database_url) == before


async def test_history_is_capped(limited):
    async with httpx.AsyncClient(base_url=limited.base_url, headers=key_of("alice"), timeout=30) as c:
        first = (await c.post("/a2a/jsonrpc", json=send_body(text_message("ask:go?")))).json()["result"]
        answer = text_message("yes", taskId=first["id"])
        done = (await c.post("/a2a/jsonrpc", json=send_body(answer))).json()["result"]
        assert done["status"]["state"] == "completed"
        assert len(done["history"]) == 2
        got = (await c.get(f"/a2a/rest/tasks/{first['id']}?historyLength=50")).json()
        assert len(got["history"]) == 2
        texts = [p.get("text") for m in got["history"] for p in m["parts"]]
        assert "ask:go?" not in texts, "the oldest messages are the ones left out"


async def test_task_creation_is_rate_limited_per_principal(limited):
    """Burst 3 at 1 a minute: alice's new tasks past the burst are refused with 429 and Retry-After (her
    follow-up in the history test was not counted), while bob still gets his."""
    async with httpx.AsyncClient(base_url=limited.base_url, headers=key_of("alice"), timeout=30) as alice:
        statuses = []
        for _ in range(6):
            resp = await alice.post("/a2a/jsonrpc", json=send_body(text_message("say:x")))
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                body = resp.json()
                assert body["error"]["code"] == -32092
                assert int(resp.headers["retry-after"]) >= 1
        assert 429 in statuses
        before = await db_state(limited.database_url)
        rest = await alice.post(
            "/a2a/rest/message:send",
            json={"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        )
        assert rest.status_code == 429 and "retry-after" in rest.headers
        assert rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert await db_state(limited.database_url) == before
    async with httpx.AsyncClient(base_url=limited.base_url, headers=key_of("bob"), timeout=30) as bob:
        resp = await bob.post("/a2a/jsonrpc", json=send_body(text_message("say:mine")))
        assert resp.status_code == 200 and "result" in resp.json()


async def test_open_streams_are_capped_per_principal(limited):
    async with httpx.AsyncClient(base_url=limited.base_url, headers=key_of("bob"), timeout=30) as bob:
        first = (await bob.post("/a2a/jsonrpc", json=send_body(text_message("ask:wait?")))).json()["result"]
        sub = {"jsonrpc": "2.0", "id": 2, "method": "tasks/resubscribe", "params": {"id": first["id"]}}
        opened = []
        try:
            for _ in range(2):
                cm = bob.stream("POST", "/a2a/jsonrpc", json=sub)
                resp = await cm.__aenter__()
                assert resp.headers["content-type"].startswith("text/event-stream")
                opened.append(cm)
            third = await bob.post("/a2a/jsonrpc", json=sub)
            assert third.status_code == 429 and third.json()["error"]["code"] == -32094
            rest = await bob.get(f"/a2a/rest/tasks/{first['id']}:subscribe", headers=V10)
            assert rest.status_code == 429
        finally:
            for cm in opened:
                await cm.__aexit__(None, None, None)
        # Closed streams give their slots back (the server notices the disconnect shortly).
        async with asyncio.timeout(60):
            while True:
                async with bob.stream("POST", "/a2a/jsonrpc", json=sub) as resp:
                    status = resp.status_code
                if status != 429:
                    break
                await asyncio.sleep(0.05)
        assert status == 200


async def test_cors_for_configured_origins(limited):
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=30) as c:
        pre = await c.options(
            "/a2a/jsonrpc",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, a2a-version, idempotency-key",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == ORIGIN
        denied = await c.options(
            "/a2a/jsonrpc",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert denied.status_code == 400 and "access-control-allow-origin" not in denied.headers
        unauth = await c.post("/a2a/jsonrpc", json={}, headers={"Origin": ORIGIN})
        assert unauth.status_code == 401
        assert unauth.headers["access-control-allow-origin"] == ORIGIN
        assert "WWW-Authenticate" in unauth.headers["access-control-expose-headers"]
        card = await c.get("/.well-known/agent-card.json", headers={"Origin": "https://evil.example"})
        assert card.headers["access-control-allow-origin"] == "*"
        card_pre = await c.options(
            "/.well-known/agent-card.json",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert card_pre.status_code == 204 and card_pre.headers["access-control-allow-origin"] == "*"
