"""Logs: the JSON and text formats, the context fields of a request or run, and the redaction filter that
masks secrets whatever a log call passes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
from collections.abc import Iterator

import pytest

from app.telemetry import logs, traces

JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJjYXJvbCIsImF1ZCI6ImEyYSJ9.c2lnbmF0dXJlLWJ5dGVz"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger through `logs.setup` (JSON) into a buffer; the previous handlers put back after."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    logs.setup("info", "json", "r-test", stream=out)
    try:
        yield out
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        logging.captureWarnings(False)


def records(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_record_is_one_json_object_with_the_context_fields(captured) -> None:
    logs.scope(task_id="t-1", context_id="c-1", role="coder", principal="alice")
    logging.getLogger("app.x").warning("hello %s", "world")
    logs.scope()
    logging.getLogger("app.y").info("bare")
    first, second = records(captured)
    assert first["message"] == "hello world"
    assert (first["level"], first["logger"], first["replica"]) == ("warning", "app.x", "r-test")
    assert (first["task_id"], first["context_id"], first["role"]) == ("t-1", "c-1", "coder")
    assert first["principal"] == hashlib.sha256(b"alice").hexdigest()[:12]
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert "alice" not in captured.getvalue()
    assert "task_id" not in second and "trace_id" not in second


def test_bind_adds_to_the_fields_tasks_share(captured) -> None:
    """A field bound deeper in the request (the task id, in the service) shows on what the request logs
    later, also from a task it started (the fields are one dict per request or run)."""

    async def request() -> None:
        logs.scope(principal="bob")

        async def service() -> None:
            logs.bind(task_id="t-9")

        await asyncio.ensure_future(service())  # another task, the same request's fields
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "POST", "/a2a/jsonrpc?token=abc", "1.1", 200
        )

    asyncio.run(request())
    (access,) = records(captured)
    assert access["task_id"] == "t-9"
    assert access["http"] == {
        "method": "POST",
        "path": "/a2a/jsonrpc?token=***",
        "status": 200,
        "client": "127.0.0.1:1",
    }


def test_an_exception_is_logged_with_its_traceback_redacted(captured) -> None:
    try:
        raise RuntimeError(f"refused Authorization: Bearer {JWT}")
    except RuntimeError:
        logging.getLogger("app.z").exception("the call failed")
    (rec,) = records(captured)
    assert "Traceback" in rec["exception"] and "RuntimeError" in rec["exception"]
    assert JWT not in captured.getvalue()


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdef123456", "abcdef123456"),
        ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("headers {'x-api-key': 'alice-0123456789', 'accept': '*/*'}", "alice-0123456789"),
        ("[('authorization', 'Bearer tok-xyz-123'), ('a2a-version', '1.0')]", "tok-xyz-123"),
        ('{"url": "https://h/x", "token": "hook-secret-1", "id": "a"}', "hook-secret-1"),
        ('{"authentication": {"schemes": ["Bearer"], "credentials": "cr3dential-9"}}', "cr3dential-9"),
        ("X-A2A-Notification-Token: n0tify-token", "n0tify-token"),
        ("GET /cb?api_key=k3y-in-query&x=1", "k3y-in-query"),
        (f"a JWT on its own: {JWT}", JWT),
        ("worker said bearer sk-live-0987654321", "sk-live-0987654321"),
        ('{"client_secret":"s3cr3t-value","password": "hunter2-hunter2"}', "s3cr3t-value"),
    ],
)
def test_secret_shapes_are_masked(text: str, secret: str) -> None:
    masked = logs.redact(text)
    assert secret not in masked, masked
    assert "***" in masked


@pytest.mark.parametrize(
    "name",
    [
        "Authorization", "PROXY-AUTHORIZATION", "X-Api-Key", "API_KEY", "Api-Key", "APIKEY",
        "X-A2A-NOTIFICATION-TOKEN", "A2A_WORKER_KEY", "A2A_Worker_Token", "Credentials", "TOKEN",
        "Access_Token", "REFRESH_TOKEN", "Id_Token", "CLIENT_SECRET", "PassWord", "PASSWD", "Secret",
    ],
)  # fmt: skip
def test_every_secret_name_is_masked_in_any_case(name: str) -> None:
    """The cheap first look (`_HINTS`) lets through every name the masks know, in whatever case."""
    assert logs.redact(f"{name}: s3cret-VALUE-42 and more") == f"{name}: *** and more"
    assert logs.redact(f"{name}=s3cret-VALUE-42") == f"{name}=***"


def test_text_without_secrets_is_left_alone() -> None:
    text = (
        'task 1b2c: webhook a of task 1b2c: event 3 attempt 2: HTTP 503; retry in 0.5s {"state": "working"}'
    )
    assert logs.redact(text) is text


def test_the_agents_environment_values_are_masked_wherever_they_appear(captured) -> None:
    logs.add_secrets(["sk-ant-api03-THE-AGENTS-KEY", "1", "short"])  # too short to mask: left as they are
    logging.getLogger("app.agents").warning("cli env: ANTHROPIC=%s MODE=1", "sk-ant-api03-THE-AGENTS-KEY")
    (rec,) = records(captured)
    assert rec["message"] == "cli env: ANTHROPIC=*** MODE=1"


def test_a_secret_that_is_a_prefix_of_another_leaves_no_tail_of_either(captured) -> None:
    """Registered in either order, in one call or two: each secret is masked whole, the longer one first,
    so the shorter never masks the head of the longer and leaves its tail in the log."""
    logs.add_secrets(["sk-abc12345"])
    logs.add_secrets(["sk-abc12345-MORE", "zz-prefix-key-1"])
    logs.add_secrets(["zz-prefix-key"])
    logging.getLogger("app.agents").warning(
        "a=%s b=%s c=%s d=%s", "sk-abc12345-MORE", "sk-abc12345", "zz-prefix-key-1", "zz-prefix-key"
    )
    (rec,) = records(captured)
    assert rec["message"] == "a=*** b=*** c=*** d=***", rec["message"]


def test_text_format_and_auto(captured) -> None:
    out = io.StringIO()
    handler = logs.setup("info", "text", "r-text", stream=out)
    logs.scope(task_id="t-2", principal="carol")
    logging.getLogger("app.t").info("plain %d", 1)
    line = out.getvalue().strip()
    assert " INFO app.t: plain 1 [task=t-2 principal=" in line
    assert isinstance(handler.formatter, logs.TextFormatter)
    assert logs.resolve("auto", io.StringIO()) == "json"  # not a terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert logs.resolve("auto", Tty()) == "text"


def test_trace_ids_on_records_under_a_span(captured) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    traces.enable(TracerProvider())
    try:
        with traces.span("work") as span:
            logging.getLogger("app.s").warning("inside")
        logging.getLogger("app.s").warning("outside")
    finally:
        traces.disable()
    inside, outside = records(captured)
    context = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert "trace_id" not in outside


def test_an_http_clients_line_per_call_shows_at_debug_only(captured) -> None:
    """httpx logs each request at info (a remote worker's every claim, event batch and long poll): at
    `info` only its warnings pass; at `debug` everything does."""
    logging.getLogger("httpx").info('HTTP Request: POST http://replica/workers/v1/claim "HTTP/1.1 200 OK"')
    logging.getLogger("httpcore.connection").info("connect_tcp.started")
    logging.getLogger("httpx").warning("a retry")
    logging.getLogger("app.worker").info("task t-1 claimed")
    assert [(r["logger"], r["message"]) for r in records(captured)] == [
        ("httpx", "a retry"),
        ("app.worker", "task t-1 claimed"),
    ]
    out = io.StringIO()
    logs.setup("debug", "json", "r-debug", stream=out)
    logging.getLogger("httpx").info("HTTP Request: POST http://replica/workers/v1/claim")
    assert "workers/v1/claim" in out.getvalue()
    logs.setup("info", "json", "r-test", stream=captured)
