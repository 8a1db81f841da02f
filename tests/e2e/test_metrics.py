"""Prometheus metrics at `/metrics` on a real server: what each call adds, streams, refusals, and the
switch that removes the path. Figures are compared before and after the calls."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BACKENDS, make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.rpc import send, text_message

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples: Samples = defaultdict(float)
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


async def after_streams_close(client: httpx.AsyncClient) -> Samples:
    """A scrape once the server has closed every stream and every run has ended (their sides end just after
    the client has its answer)."""
    async with asyncio.timeout(30):
        while True:
            samples = await scrape(client)
            if (
                samples[("a2a_http_open_streams", (("binding", "jsonrpc"),))] == 0
                and samples[("a2a_agent_runs", (("role", "default"),))] == 0
                and samples[("a2a_tasks_held", ())] == 0
            ):
                return samples
            await asyncio.sleep(0.05)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after[key] - before[key]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_metrics_count_calls_tasks_commits_and_streams(backend: str, tmp_path: Path):
    """On a server of its own: the shared one may still run other tests' agents."""
    srv = await make_server(backend, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            await _count_calls(client)
    finally:
        srv.stop()


async def _count_calls(client: httpx.AsyncClient) -> None:
    before = await scrape(client)
    for i in range(3):
        assert (await send(client, f"say:hi {i}"))["status"]["state"] == "completed"
    unknown = {"jsonrpc": "2.0", "id": 1, "method": "tasks/nothing", "params": {}}
    assert (await client.post("/a2a/jsonrpc", json=unknown)).json()["error"]["code"] == -32601
    missing = await client.get("/a2a/rest/tasks/no-such-task", headers={"A2A-Version": "1.0"})
    assert missing.status_code == 404
    stream = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "message/stream",
        "params": {"message": text_message("say:streamed")},
    }
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=stream) as events:
        items = [json.loads(e.data) async for e in events.aiter_sse()]
    assert items[-1]["result"]["status"]["state"] == "completed"
    after = await after_streams_close(client)

    assert delta(before, after, "a2a_http_requests_total", binding="jsonrpc", code="200") == 5
    assert delta(before, after, "a2a_http_requests_total", binding="rest_v10", code="404") == 1
    assert delta(before, after, "a2a_http_requests_total", binding="ops", code="200") >= 1, "the scrape"
    # The stream is not timed (it lasts as long as the task); the four unary calls are.
    assert delta(before, after, "a2a_http_request_duration_seconds_count", binding="jsonrpc") == 4
    assert delta(before, after, "a2a_tasks_created_total") == 4
    assert delta(before, after, "a2a_tasks_ended_total", state="completed") == 4
    assert delta(before, after, "a2a_store_writes_total") >= 8, "a task's creation and its end at least"
    assert (
        1 <= delta(before, after, "a2a_store_commits_total") <= delta(before, after, "a2a_store_writes_total")
    )
    # Every commit is timed, and the buckets hold them all.
    commits = delta(before, after, "a2a_store_commits_total")
    assert delta(before, after, "a2a_store_commit_duration_seconds_count") == commits
    assert delta(before, after, "a2a_store_commit_duration_seconds_bucket", le="+Inf") == commits
    assert after[("a2a_agent_runs", (("role", "default"),))] == 0
    assert after[("a2a_agent_slots", (("role", "default"),))] >= 1
    assert after[("a2a_tasks_held", ())] == 0


async def test_metrics_need_no_credential_and_count_refusals(tmp_path: Path):
    srv = await make_server("sqlite", tmp_path, **api_keys_env())
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            before = await scrape(client)
            body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
            assert (await client.post("/a2a/jsonrpc", json=body)).status_code == 401
            known = await client.post("/a2a/jsonrpc", json=body, headers=key_of("alice"))
            assert known.json()["error"]["code"] == -32001
            after = await scrape(client)
        assert delta(before, after, "a2a_http_requests_total", binding="jsonrpc", code="401") == 1
        assert delta(before, after, "a2a_http_requests_total", binding="jsonrpc", code="200") == 1
    finally:
        srv.stop()


async def test_metrics_can_be_turned_off(tmp_path: Path):
    srv = await make_server("sqlite", tmp_path, METRICS_ENABLED="false")
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            assert (await client.get("/metrics")).status_code == 404
            assert (await client.get("/healthz")).status_code == 200
    finally:
        srv.stop()
