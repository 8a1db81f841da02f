"""Structured logs of a real server (`LOG_FORMAT=json`): every line is one JSON object; the access line of a
send carries its task id, the role and the caller's hashed principal, as do its run's start and end lines; no
key or token the calls carried is in the log. (tests/conftest.py checks the last for every log of the run.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_server
from tests.e2e.test_push import PUSH_ENV
from tests.support.auth import KEYS, api_keys_env, key_of
from tests.support.receiver import Receiver
from tests.support.rpc import send_request
from tests.support.secrets import remember

WEBHOOK_TOKEN = "hook-token-" + "7f3a9c2e5b1d"
AGENT_SECRET = "agent-env-secret-" + "4e8b0d2c"
remember(WEBHOOK_TOKEN, AGENT_SECRET)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_json_logs_parse_line_by_line_and_carry_the_task_id(backend: str, tmp_path: Path) -> None:
    env = api_keys_env(
        **PUSH_ENV,
        LOG_FORMAT="json",
        LOG_LEVEL="info",
        AGENT_ENV=json.dumps({"SOME_API_KEY": AGENT_SECRET}),
    )
    srv = await make_server(backend, tmp_path, **env)
    hooks = Receiver()
    try:
        body = send_request(
            "hello",
            {"blocking": True, "pushNotificationConfig": {"url": hooks.url("/logs"), "token": WEBHOOK_TOKEN}},
            messageId="m-logs",
        )
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
            task = (await c.post("/a2a/jsonrpc", json=body, headers=key_of("alice"))).json()["result"]
            refused = await c.post("/a2a/jsonrpc", json=body, headers={"Authorization": "Bearer not-a-key"})
            assert refused.status_code == 401
            await hooks.wait_for(lambda: len(hooks.at("/logs")) >= 1)
    finally:
        srv.stop()
        hooks.close()
    assert all("traceparent" not in call.headers for call in hooks.at("/logs"))  # tracing is off

    lines = srv.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "replica"} <= r.keys() for r in records)
    start = next(r for r in records if r["logger"] == "app.start")
    assert "auth required" in start["message"]
    access = [r for r in records if r["logger"] == "uvicorn.access" and r.get("task_id") == task["id"]]
    assert len(access) == 1, records
    (line,) = access
    assert line["principal"] == hashlib.sha256(b"alice").hexdigest()[:12]
    assert (line["role"], line["context_id"]) == ("default", task["contextId"])
    assert line["http"]["status"] == 200 and line["http"]["path"] == "/a2a/jsonrpc"
    assert any(r["logger"] == "uvicorn.access" and r["http"]["status"] == 401 for r in records)
    # The run's own two lines at info (the scripted agent is not pure), in its task's context.
    runs = [r for r in records if r["logger"] == "app.runner.run" and r.get("task_id") == task["id"]]
    assert [(r["level"], r["message"].split(": ")[1].split(" after")[0]) for r in runs] == [
        ("info", f"run started on {line['replica']}"),
        ("info", "run over"),
    ], runs
    assert runs[1]["message"].endswith(", task completed") and runs[1]["principal"] == line["principal"]
    text = srv.log_path.read_text()
    for secret in (KEYS["alice"], WEBHOOK_TOKEN, AGENT_SECRET, "alice"):
        assert secret not in text
