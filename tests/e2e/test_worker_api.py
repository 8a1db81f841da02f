"""The worker endpoints under hostile input: every malformed call is a clear 4xx that changes nothing, never a
5xx; a batch of events is stored once however often it is sent, and events that are not the worker's are
refused."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest

from app.api.edge.auth import hash_key
from app.protocol.events import status_update
from app.protocol.model import TaskState
from app.tasks.worker_wire import events_to_wire
from tests.conftest import BACKENDS, make_server
from tests.support.rpc import send_request
from tests.support.secrets import remember
from tests.support.server import ServerProcess

KEY = "wk-" + os.urandom(8).hex()
remember(KEY)
AGENTS = {"default": {"adapter": "echo"}, "coder": {"adapter": "scripted"}}
ASK = {"role": "coder", "instance": "i1"}


@pytest.fixture(scope="module", params=BACKENDS)
async def srv(request: pytest.FixtureRequest, tmp_path_factory: Any):
    server = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"workers-{request.param}"),
        AGENTS=json.dumps(AGENTS),
        AGENT_ROLES="default",
        WORKER_KEYS=json.dumps({hash_key(KEY): "box"}),
    )
    yield server
    server.stop()


async def test_malformed_calls_are_4xx(srv: ServerProcess):
    h = {"X-API-Key": KEY}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30, headers=h) as c:
        cases = [
            ("POST", "/workers/v1/claim", b"{not json", 400),
            ("POST", "/workers/v1/claim", json.dumps({**ASK}).encode(), 400),  # no limit
            ("POST", "/workers/v1/claim", json.dumps({**ASK, "limit": 0}).encode(), 400),
            ("POST", "/workers/v1/claim", json.dumps({**ASK, "limit": 1, "instance": "../x"}).encode(), 400),
            (
                "POST",
                "/workers/v1/claim",
                json.dumps({"role": "nobody", "instance": "i", "limit": 1}).encode(),
                404,
            ),
            ("POST", "/workers/v1/sync", json.dumps({**ASK, "tasks": {"t": "x"}}).encode(), 400),
            (
                "POST",
                "/workers/v1/tasks/no-such/events",
                json.dumps({**ASK, "after": 1, "events": []}).encode(),
                409,
            ),
            (
                "POST",
                "/workers/v1/tasks/x/events",
                json.dumps({**ASK, "after": 0, "events": []}).encode(),
                400,
            ),
            ("GET", "/workers/v1/whoami?role=coder", b"", 400),
            ("GET", "/workers/v1/tasks/no-such?role=coder&instance=i1", b"", 404),
        ]
        for method, path, body, status in cases:
            resp = await c.request(method, path, content=body, headers={"content-type": "application/json"})
            assert resp.status_code == status, (path, body, resp.text)
            assert resp.json()["error"]["message"], resp.text


async def test_a_batch_is_stored_once_and_foreign_events_are_refused(srv: ServerProcess):
    h = {"X-API-Key": KEY}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        body = send_request("hi", {"blocking": False})
        task = (await c.post("/agents/coder/a2a/jsonrpc", json=body)).json()["result"]
        claimed = (await c.post("/workers/v1/claim", json={**ASK, "limit": 1}, headers=h)).json()["tasks"]
        assert [t["task"]["id"] for t in claimed] == [task["id"]]
        after = claimed[0]["lastSeq"]
        working = events_to_wire([status_update(task["id"], task["contextId"], TaskState.WORKING)])
        batch = {**ASK, "after": after, "events": working}
        path = f"/workers/v1/tasks/{task['id']}/events"
        first = await c.post(path, json=batch, headers=h)
        again = await c.post(path, json=batch, headers=h)
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        assert first.json()["lastSeq"] == again.json()["lastSeq"] == after + 1
        other = events_to_wire([status_update(task["id"], task["contextId"], TaskState.WORKING, "not mine")])
        foreign = await c.post(path, json={**ASK, "after": after, "events": other}, headers=h)
        assert foreign.status_code == 409, foreign.text
        elsewhere = await c.post(path, json={**batch, "instance": "i2", "after": after + 1}, headers=h)
        assert elsewhere.status_code == 409, "another instance's events for this task are refused"
        bad = await c.post(path, json={**ASK, "after": after + 1, "events": [{"kind": "nope"}]}, headers=h)
        assert bad.status_code == 400, bad.text
        got = (
            await c.post(
                "/agents/coder/a2a/jsonrpc",
                json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}},
            )
        ).json()["result"]
        assert got["status"]["state"] == "working"


async def test_a_retried_batch_whose_buffer_grew_stores_each_event_once(srv: ServerProcess):
    """A worker whose answer was lost resends from the same `after` with more events buffered since: the
    part already stored is skipped, the rest stored once, and the answer's last sequence is the new end."""
    h = {"X-API-Key": KEY}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        body = send_request("grown", {"blocking": False})
        task = (await c.post("/agents/coder/a2a/jsonrpc", json=body)).json()["result"]
        claimed = (await c.post("/workers/v1/claim", json={**ASK, "limit": 1}, headers=h)).json()["tasks"]
        assert [t["task"]["id"] for t in claimed] == [task["id"]]
        after = claimed[0]["lastSeq"]
        tid, ctx = task["id"], task["contextId"]
        events = [
            status_update(tid, ctx, TaskState.WORKING),
            status_update(tid, ctx, TaskState.WORKING, "step 1"),
            status_update(tid, ctx, TaskState.WORKING, "step 2"),
            status_update(tid, ctx, TaskState.WORKING, "step 3"),
        ]
        path = f"/workers/v1/tasks/{tid}/events"
        first = await c.post(
            path, json={**ASK, "after": after, "events": events_to_wire(events[:2])}, headers=h
        )
        assert first.status_code == 200 and first.json()["lastSeq"] == after + 2, first.text
        grown = await c.post(path, json={**ASK, "after": after, "events": events_to_wire(events)}, headers=h)
        assert grown.status_code == 200 and grown.json()["lastSeq"] == after + 4, grown.text
        again = await c.post(path, json={**ASK, "after": after, "events": events_to_wire(events)}, headers=h)
        assert again.status_code == 200 and again.json()["lastSeq"] == after + 4, again.text
        stale = await c.post(
            path, json={**ASK, "after": after, "events": events_to_wire(events[:2])}, headers=h
        )
        assert stale.status_code == 200 and stale.json()["lastSeq"] == after + 2, "acknowledged as sent"
        rpc = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": tid}}
        got = (await c.post("/agents/coder/a2a/jsonrpc", json=rpc)).json()["result"]
    notes = [m["parts"][0]["text"] for m in got["history"] if m["role"] == "agent"]
    assert notes == ["step 1", "step 2", "step 3"], "each event stored once, in order"
    assert got["status"]["message"]["parts"][0]["text"] == "step 3"
