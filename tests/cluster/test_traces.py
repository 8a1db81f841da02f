"""Traces across real replicas, exported over OTLP/HTTP to a receiver in this test and decoded there.

Two replicas on one PostgreSQL and Redis: A serves calls but runs no `coder` agent (`AGENT_ROLES`), B runs
it (an `ndjson` agent whose process reports the `TRACEPARENT` it was given). A send to A with the caller's
`traceparent` is one trace: A's request span, B's agent run and CLI process spans, the commit batches and
bus publishes between, the webhook call's span, and the `traceparent` the webhook receives. The same holds
for a send over gRPC (the caller's `traceparent` in its metadata).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.conftest import migrated_pg_database
from tests.e2e.test_push import PUSH_ENV
from tests.support.otlp import OtlpReceiver, Span
from tests.support.receiver import Receiver
from tests.support.rpc import send_request
from tests.support.server import ServerProcess, free_port, until_available

WAIT_S = 60
FAKE = """
import json, os, sys
prompt = json.loads(sys.stdin.readline())
tp = os.environ.get("TRACEPARENT", "")
print(json.dumps({"kind": "thinking", "text": "TRACEPARENT=" + tp}), flush=True)
print(json.dumps({"kind": "done", "summary": "traced"}), flush=True)
"""
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
GRPC_TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ServerProcess, OtlpReceiver]]:
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both")
    script = tmp_path / "fake_traced_cli.py"
    script.write_text(FAKE)
    agents = {
        "reviewer": {"adapter": "scripted"},
        "coder": {"adapter": "ndjson", "command": f"{sys.executable} {script}"},
    }
    receiver = OtlpReceiver()
    db = await migrated_pg_database(pg)
    common = {
        **PUSH_ENV,
        **receiver.env(),
        "AGENTS": json.dumps(agents),
        "AGENT_SANDBOX": "none",
        "AGENT_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        "REDIS_URL": redis,
        "QUEUE_POLL_S": "0.5",
    }
    a = ServerProcess(
        db,
        tmp_path / "a.log",
        AGENT_ROLES="reviewer",
        REPLICA_ID="trace-a",
        GRPC_PORT=str(free_port()),
        **common,
    )
    b = ServerProcess(db, tmp_path / "b.log", AGENT_ROLES="coder", REPLICA_ID="trace-b", **common)
    try:
        a.start()
        b.start()
        await until_available([a, b], agents)  # sends to A reach B's coder without waiting for it
        yield a, b, receiver
    finally:
        a.stop()
        b.stop()
        receiver.close()


def one(spans: list[Span], name: str, trace_id: str, replica: str | None = None) -> Span:
    found = [s for s in spans if s.name == name and s.trace_id == trace_id]
    if replica is not None:
        found = [s for s in found if s.replica == replica]
    assert len(found) == 1, (name, replica, [(s.name, s.replica) for s in spans if s.trace_id == trace_id])
    return found[0]


def artifact_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


async def test_one_trace_from_the_request_on_a_to_the_run_on_b_and_the_webhook(replicas) -> None:
    a, _b, otlp = replicas
    hooks = Receiver()
    try:
        body = send_request(
            "go",
            {
                "blocking": True,
                "pushNotificationConfig": {"url": hooks.url("/hook"), "token": "hook-token-traces"},
            },
            messageId="m-traced",
        )
        headers = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            resp = await http.post(f"{a.base_url}/agents/coder/a2a/jsonrpc", json=body, headers=headers)
        task = resp.json()["result"]
        assert task["status"]["state"] == "completed", task
        # The traceparent is the server's business: clients never see it.
        assert "traceparent" not in json.dumps(task.get("metadata")).lower()

        def complete(spans: list[Span]) -> bool:
            names = {(s.name, s.replica) for s in spans if s.trace_id == CLIENT_TRACE}
            wanted = {("POST /a2a/jsonrpc", "trace-a"), ("agent.run", "trace-b"), ("cli.process", "trace-b")}
            return wanted <= names and any(n == "push.deliver" for n, _ in names)

        spans = await otlp.until(complete, WAIT_S)
        request = one(spans, "POST /a2a/jsonrpc", CLIENT_TRACE, "trace-a")
        assert (request.kind, request.parent_id) == ("server", CLIENT_SPAN)
        assert request.attributes["http.response.status_code"] == 200
        run = one(spans, "agent.run", CLIENT_TRACE, "trace-b")
        assert run.parent_id == request.span_id  # stored with the task on A, continued on B
        assert (run.attributes["a2a.task_id"], run.attributes["a2a.role"]) == (task["id"], "coder")
        cli = one(spans, "cli.process", CLIENT_TRACE, "trace-b")
        assert cli.parent_id == run.span_id
        assert f"TRACEPARENT=00-{CLIENT_TRACE}-{cli.span_id}-01" in artifact_text(task)
        ours = [s for s in spans if s.trace_id == CLIENT_TRACE]
        assert any(s.name == "store.commit" and s.replica == "trace-b" for s in ours)
        assert any(s.name == "bus.publish" and s.replica == "trace-b" for s in ours)
        deliveries = [s for s in ours if s.name == "push.deliver"]
        assert all(s.parent_id == request.span_id and s.kind == "client" for s in deliveries)

        await hooks.wait_for(lambda: len(hooks.at("/hook")) >= len(deliveries), WAIT_S)
        calls = hooks.at("/hook")
        sent = {c.headers.get("traceparent") for c in calls}
        assert {f"00-{CLIENT_TRACE}-{s.span_id}-01" for s in deliveries} <= sent
        assert all(c.headers["traceparent"].split("-")[1] == CLIENT_TRACE for c in calls)
        # Health checks and scrapes make no traces.
        assert not [s for s in spans if s.name.endswith(("/readyz", "/healthz", "/metrics"))]
    finally:
        hooks.close()


async def test_a_grpc_send_is_traced_on_a_and_continued_on_b(replicas) -> None:
    a, _b, otlp = replicas
    message = a2a_pb2.Message(message_id="m-grpc", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="go")])
    metadata = (("traceparent", f"00-{GRPC_TRACE}-{CLIENT_SPAN}-01"), ("a2a-role", "coder"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{a.env['GRPC_PORT']}") as channel:
        sent = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
            a2a_pb2.SendMessageRequest(message=message), metadata=metadata, timeout=WAIT_S
        )
    assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED

    def complete(spans: list[Span]) -> bool:
        names = {s.name for s in spans if s.trace_id == GRPC_TRACE}
        return {"gRPC lf.a2a.v1.A2AService/SendMessage", "agent.run"} <= names

    spans = await otlp.until(complete, WAIT_S)
    request = one(spans, "gRPC lf.a2a.v1.A2AService/SendMessage", GRPC_TRACE, "trace-a")
    assert (request.kind, request.parent_id, request.attributes["rpc.grpc.status"]) == (
        "server",
        CLIENT_SPAN,
        "OK",
    )
    run = one(spans, "agent.run", GRPC_TRACE, "trace-b")
    assert run.parent_id == request.span_id
