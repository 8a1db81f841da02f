"""Hostile input against a real server process (the scripted test agent), on SQLite and on PostgreSQL.

Systematic matrices first: every JSON-RPC envelope field (`jsonrpc`, `id`, `method`, `params`) and every
top-level params field typed as every JSON type, for every method of both versions, alone and in batches;
every REST route of both bindings (with and without a tenant) and the aliases, with hostile path ids,
query values and bodies; resume cursors on every binding that takes one. Then hypothesis on the JSON-RPC
endpoint and schemathesis on the REST routes (from the app's own OpenAPI document).

Whatever arrives: no 5xx, no dropped connection, no traceback in an answer or in the server's log, every
answer a well-formed success or error in its binding's shape, never an internal error, and a rejected
request leaves the database exactly as it was. Each backend's counts are printed at the end.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import string
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings, strategies as st

from app.api.bindings.openapi import document
from app.api.ops import v03 as ops_v03, v10 as ops_v10
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.auth import api_keys_env, key_of
from tests.support.counting import CountingClient, Tally
from tests.support.server import ServerProcess

JSONRPC_EXAMPLES = 150
REST_EXAMPLES = 8
V10 = {"A2A-Version": "1.0"}
METHODS_V03 = sorted({*ops_v03.METHODS, *ops_v03.STREAMING})
METHODS_V10 = sorted({*ops_v10.METHODS, *ops_v10.STREAMING})
STREAMING = {*ops_v03.STREAMING, *ops_v10.STREAMING}

# Every JSON type, and the edges of each (json.dumps writes integers past 64 bits; orjson reads them as
# floats).
TYPED: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int": 7,
    "negative": -1,
    "u64": 2**64 - 1,
    "huge int": 10**40,
    "float": 1.5,
    "1e300": 1e300,
    "empty string": "",
    "string": "x",
    "long string": "x" * 3000,
    "empty list": [],
    "list": [1, "a"],
    "empty object": {},
    "object": {"a": 1},
}
MISSING = object()


class Backend:
    """One server on one database, the counts of everything sent to it, and a reader of its state."""

    def __init__(self, name: str, server: ServerProcess, log: Path) -> None:
        self.name = name
        self.server = server
        self.log = log
        self.tally = Tally()
        self.task_id = ""
        self._loop = asyncio.new_event_loop()
        self._pg: asyncpg.Connection | None = None
        self.say: Callable[[str], None] = print

    def client(self, tally: Tally | None = None, **headers: str) -> CountingClient:
        return CountingClient(self.server.base_url, {**key_of("alice"), **headers}, tally or self.tally)

    def db_state(self) -> tuple[Any, ...]:
        queries = (
            "SELECT id, owner, state, last_seq FROM tasks ORDER BY id",
            "SELECT count(*) FROM messages",
            "SELECT count(*) FROM events",
            "SELECT count(*) FROM artifacts",
            "SELECT count(*) FROM push_configs",
        )
        url = self.server.database_url
        if url.startswith("sqlite"):
            with sqlite3.connect(url.split("///", 1)[1]) as conn:
                return tuple(conn.execute(q).fetchall() for q in queries)
        if self._pg is None:
            dsn = url.replace("postgresql+asyncpg://", "postgresql://")
            self._pg = self._loop.run_until_complete(asyncpg.connect(dsn))
        pg = self._pg
        return tuple(tuple(map(tuple, self._loop.run_until_complete(pg.fetch(q)))) for q in queries)

    def close(self) -> None:
        if self._pg is not None:
            self._loop.run_until_complete(self._pg.close())
        self._loop.close()


@pytest.fixture(scope="module", params=BACKENDS)
async def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Backend]:
    tmp = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    srv = ServerProcess(
        await migrated_database_url(request.param, tmp),
        tmp / "server.log",
        **api_keys_env(MAX_BODY_BYTES="65536", BLOCKING_TIMEOUT_S="2"),
    )
    srv.start()
    b = Backend(request.param, srv, tmp / "server.log")
    async with httpx.AsyncClient(base_url=srv.base_url, headers=key_of("alice"), timeout=20) as c:
        sent = await c.post("/a2a/jsonrpc", json=rpc("message/send", params_for("message/send", "")))
        b.task_id = sent.json()["result"]["id"]
    yield b
    srv.stop()
    await asyncio.to_thread(b.close)
    log = b.log.read_text()
    assert "Traceback" not in log and "never retrieved" not in log, f"the server logged an error: {b.log}"


@pytest.fixture(autouse=True)
def _counts_to_the_terminal(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """The counts are printed even when output is captured (`pytest -q`)."""

    def say(line: str) -> None:
        with capsys.disabled():
            print("\n" + line)

    backend.say = say


def rpc(method: Any, params: Any = MISSING, rid: Any = 1, jsonrpc: Any = "2.0") -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, value in (("jsonrpc", jsonrpc), ("id", rid), ("method", method), ("params", params)):
        if value is not MISSING:
            body[key] = value
    return body


def params_for(method: str, task_id: str) -> dict[str, Any]:
    """Plausible params for `method`: every failure the matrix sees comes from the one field it changes."""
    mid = uuid.uuid4().hex
    if method in ops_v10.METHODS or method in ops_v10.STREAMING:
        return {
            "SendMessage": {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
            "SendStreamingMessage": {
                "message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            },
            "GetTask": {"id": task_id, "historyLength": 1},
            "ListTasks": {"pageSize": 2},
            "CancelTask": {"id": task_id},
            "SubscribeToTask": {"id": task_id},
            "CreateTaskPushNotificationConfig": {"taskId": task_id, "url": "https://example.com/hook"},
            "GetTaskPushNotificationConfig": {"taskId": task_id, "id": "c1"},
            "ListTaskPushNotificationConfigs": {"taskId": task_id},
            "DeleteTaskPushNotificationConfig": {"taskId": task_id, "id": "c1"},
        }.get(method, {})
    message = {"kind": "message", "messageId": mid, "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    if method in ("message/send", "message/stream", "tasks/send", "tasks/sendSubscribe"):
        return {"message": message}
    if "pushNotification" in method and method.endswith("/set"):
        return {"taskId": task_id, "pushNotificationConfig": {"url": "https://example.com/hook"}}
    if "pushNotification" in method:
        return {"id": task_id, "pushNotificationConfigId": "c1"}
    if method.startswith("tasks/"):
        return {"id": task_id}
    return {}


def headers_for(method: str) -> dict[str, str]:
    return V10 if method in METHODS_V10 else {}


def dumps(value: Any) -> bytes:
    """JSON by the standard library: it writes integers past 64 bits and Infinity (the server must refuse)."""
    return json.dumps(value).encode()


def rpc_answers(resp: httpx.Response | None) -> list[dict[str, Any]] | None:
    """The JSON-RPC answers of a response (an SSE stream's frames included); None if none or not JSON."""
    if resp is None:
        return None
    if resp.status_code == 204:
        return []
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return [orjson.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:")]
    try:
        body = resp.json()
    except ValueError:
        return None
    return body if isinstance(body, list) else [body]


def well_formed(answer: Any) -> bool:
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0" or "id" not in answer:
        return False
    if "error" in answer:
        err = answer["error"]
        return (
            isinstance(err, dict) and isinstance(err.get("code"), int) and isinstance(err.get("message"), str)
        )
    return "result" in answer


def check_rpc(
    tally: Tally, what: str, resp: httpx.Response | None, expect: Callable[[Any], str | None]
) -> None:
    """Record a problem unless every answer is well formed, none is an internal error, and `expect` agrees."""
    answers = rpc_answers(resp)
    if resp is None:
        return  # the client counted the drop
    if resp.status_code not in (200, 204) or answers is None:
        tally.problems.append(f"{what}: HTTP {resp.status_code} {resp.text[:200]}")
        return
    for answer in answers:
        if not well_formed(answer):
            tally.problems.append(f"{what}: malformed answer {answer!r:.200}")
        elif answer.get("error", {}).get("code") == -32603:
            tally.problems.append(f"{what}: an internal error for client input")
    wrong = expect(answers)
    if wrong:
        tally.problems.append(f"{what}: {wrong}")


def finish(b: Backend, tally: Tally, label: str) -> None:
    """Add a test's counts to the backend's, print them, and fail on any problem."""
    b.tally.add(tally)
    b.say(tally.line(f"{label} [{b.name}]"))
    assert tally.server_errors == 0 and tally.dropped == 0 and not tally.problems, "\n".join(
        tally.problems[:15]
    )


# ---- JSON-RPC: the envelope matrix --------------------------------------------------------------------


def _envelope_expectation(field: str, value: Any) -> Callable[[Any], str | None]:
    """What a request with envelope `field` set to `value` must get back."""

    def one_error(code: int, rid: Any = MISSING) -> Callable[[Any], str | None]:
        def check(answers: Any) -> str | None:
            if len(answers) != 1 or answers[0].get("error", {}).get("code") != code:
                return f"expected error {code}, got {answers!r:.200}"
            if rid is not MISSING and answers[0]["id"] != rid:
                return f"expected id {rid!r}, got {answers[0]['id']!r}"
            return None

        return check

    def echoes(rid: Any) -> Callable[[Any], str | None]:
        def check(answers: Any) -> str | None:
            wrong = [a for a in answers if a["id"] != rid]
            return f"the answer's id is not the request's {rid!r}: {wrong!r:.200}" if wrong else None

        return check

    if field == "jsonrpc" and value != "2.0":
        return one_error(-32600)
    if field == "method" and (not isinstance(value, str) or not value):
        return one_error(-32600)
    if field == "method":
        return one_error(-32601)
    if field == "id" and value is not MISSING:
        valid = value is None or isinstance(value, str) or (type(value) is int and value < 2**64)
        return echoes(value) if valid else one_error(-32600, None)
    if field == "id":
        return lambda answers: f"a notification was answered: {answers!r:.200}" if answers else None
    if field == "params" and value is not MISSING and not isinstance(value, dict | list):
        return one_error(-32600)
    return lambda answers: None


def envelope_cases(
    method: str, task_id: str
) -> Iterator[tuple[str, dict[str, Any], Callable[[Any], str | None]]]:
    """(label, request object, expectation) for every envelope field and params field of `method`."""
    for field in ("jsonrpc", "id", "method", "params"):
        for name, value in [*TYPED.items(), ("missing", MISSING)]:
            if field == "id" and value is MISSING and method in STREAMING:
                continue  # a streaming notification opens and closes a stream: covered by its own test
            body = rpc(method, params_for(method, task_id))
            if value is MISSING:
                del body[field]
            else:
                body[field] = value
            yield f"{method} {field}={name}", body, _envelope_expectation(field, value)
    for key in params_for(method, task_id):
        for name, value in TYPED.items():
            params = {**params_for(method, task_id), key: value}
            yield f"{method} params.{key}={name}", rpc(method, params), lambda answers: None


@pytest.mark.parametrize("methods", [METHODS_V03, METHODS_V10], ids=["v0.3", "v1.0"])
def test_every_envelope_field_typed_as_every_json_type(backend: Backend, methods: list[str]) -> None:
    tally = Tally()
    client = backend.client(tally)
    for method in methods:
        for label, body, expect in envelope_cases(method, backend.task_id):
            resp = client.post("/a2a/jsonrpc", content=dumps(body), headers=headers_for(method))
            check_rpc(tally, label, resp, expect)
    client.close()
    finish(backend, tally, f"envelope matrix {'v1.0' if methods is METHODS_V10 else 'v0.3'}")


def is_notification(item: Any) -> bool:
    """A valid request without an id (JSON-RPC 2.0 §4.1); an invalid one is answered, with id null."""
    return (
        isinstance(item, dict)
        and "id" not in item
        and item.get("jsonrpc") == "2.0"
        and isinstance(item.get("method"), str)
        and bool(item["method"])
        and isinstance(item.get("params", {}), dict | list)
    )


def test_batches_of_every_envelope_variant(backend: Backend) -> None:
    """One batch per method holding all its variants (and items that are not objects): one answer per
    request that has an id, none for a notification, never an internal error."""
    tally = Tally()
    client = backend.client(tally)
    odd_items = [1, "x", None, [], [1], {}, True]
    for method in [*METHODS_V03, *METHODS_V10, "no/such"]:
        items = [body for _, body, _ in envelope_cases(method, backend.task_id)] + odd_items
        expected = sum(1 for it in items if not is_notification(it))

        def count(answers: Any, expected: int = expected) -> str | None:
            return None if len(answers) == expected else f"{len(answers)} answers to {expected} requests"

        resp = client.post("/a2a/jsonrpc", content=dumps(items), headers=headers_for(method))
        check_rpc(tally, f"batch of {method}", resp, count)
    for body in (b"[]", b"[[]]", b"[[[1]]]", dumps([rpc("tasks/get", {"id": backend.task_id})] * 50)):
        check_rpc(tally, f"batch {body[:40]!r}", client.post("/a2a/jsonrpc", content=body), lambda a: None)
    client.close()
    finish(backend, tally, "batch matrix")


def test_streaming_notifications_are_not_answered(backend: Backend) -> None:
    tally = Tally()
    client = backend.client(tally)
    for method in sorted(STREAMING):
        body = rpc(method, params_for(method, backend.task_id))
        del body["id"]
        resp = client.post("/a2a/jsonrpc", content=dumps(body), headers=headers_for(method))
        if resp is not None and resp.status_code != 204:
            tally.problems.append(f"notification {method}: HTTP {resp.status_code} {resp.text[:200]}")
    client.close()
    finish(backend, tally, "streaming notifications")


# ---- resume cursors -----------------------------------------------------------------------------------

BAD_CURSOR_HEADERS = ["9" * 400, "-1", "1.5", "1e300", "abc", "2147483648", "", "0x10", "7 7"]
BAD_CURSOR_VALUES = [1e300, -1, 1.5, True, "9" * 400, 2**31, 10**40, [], {}, "x"]
GOOD_CURSORS = ["0", "2", "2147483647"]


def _cursor_routes(task_id: str) -> list[tuple[str, str, str, dict[str, str], str]]:
    """(label, HTTP method, path, headers, binding) of every way to resume a stream."""
    routes = [("jsonrpc tasks/resubscribe", "POST", "/a2a/jsonrpc", {}, "jsonrpc-v03")]
    routes.append(("jsonrpc SubscribeToTask", "POST", "/a2a/jsonrpc", V10, "jsonrpc-v10"))
    for verb in ("GET", "POST"):
        routes.append(
            (f"v0.3 REST {verb} :subscribe", verb, f"/a2a/rest/v1/tasks/{task_id}:subscribe", {}, "v03")
        )
        for prefix in ("/a2a/rest", "/a2a/rest/acme"):
            path = f"{prefix}/tasks/{task_id}:subscribe"
            routes.append((f"v1.0 REST {verb} {prefix}", verb, path, {}, "v10"))
    return routes


def _resume(
    client: CountingClient,
    route: tuple[str, str, str, dict[str, str], str],
    task_id: str,
    header: str | None = None,
    metadata: Any = MISSING,
    cut: bool = True,
) -> httpx.Response | None:
    _, verb, path, headers, binding = route
    extra = dict(headers)
    if header is not None:
        extra["Last-Event-ID"] = header
    params: dict[str, Any] = {"id": task_id}
    if metadata is not MISSING:
        params["metadata"] = {"lastEventId": metadata}
    if binding.startswith("jsonrpc"):
        method = "tasks/resubscribe" if binding == "jsonrpc-v03" else "SubscribeToTask"
        return client.post(path, content=dumps(rpc(method, params)), headers=extra, cut_streams=cut)
    body = dumps({"metadata": params["metadata"]}) if "metadata" in params and verb == "POST" else None
    return client.request(verb, path, content=body, headers=extra, cut_streams=cut)


def _refused(resp: httpx.Response, binding: str) -> str | None:
    """None if `resp` refuses the cursor as invalid params before any stream, else what is wrong."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        if "content-length" not in resp.headers:
            return "a stream started"
        events = rpc_answers(resp) or [{}]  # an error as the one event of a stream (v0.3 §3.3.1)
        body = events[0] if len(events) == 1 else {}
    else:
        body = resp.json()
    if binding.startswith("jsonrpc"):
        ok = resp.status_code == 200 and body.get("error", {}).get("code") == -32602
    elif binding == "v03":
        ok = resp.status_code in (400, 422) and body.get("code") == -32602
    else:
        ok = resp.status_code == 400 and body["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    return None if ok else f"HTTP {resp.status_code} {resp.text[:200]}"


def test_resume_cursors_out_of_range_are_refused_before_the_stream(backend: Backend) -> None:
    """Every binding and version that resumes by cursor: an out-of-range or non-integer cursor is -32602
    (HTTP 400; 422 on the v0.3 REST binding, as a2a-python 0.3 answers invalid params) before any
    stream starts; a valid one streams to its end on a kept connection."""
    tally = Tally()
    client = backend.client(tally)
    # A task that stays open (input-required), so that SubscribeToTask reaches its cursor.
    opened = client.post(
        "/a2a/jsonrpc",
        json=rpc(
            "message/send",
            {
                "message": params_for("message/send", "")["message"]
                | {"parts": [{"kind": "text", "text": "ask:go on?"}]},
                "configuration": {"blocking": False},
            },
        ),
    )
    assert opened is not None
    for task_id in (backend.task_id, opened.json()["result"]["id"]):
        for route in _cursor_routes(task_id):
            label, verb, _, _, binding = route
            if binding in ("v10", "jsonrpc-v10") and task_id == backend.task_id:
                continue  # a finished task cannot be subscribed to in v1.0: the open one covers it
            cases = [("Last-Event-ID", h, MISSING) for h in BAD_CURSOR_HEADERS]
            if binding.startswith("jsonrpc") or verb == "POST":
                cases += [("metadata.lastEventId", None, v) for v in BAD_CURSOR_VALUES]
            for where, header, value in cases:
                resp = _resume(client, route, task_id, header, value)
                if resp is not None and (wrong := _refused(resp, binding)):
                    tally.problems.append(f"{label} {where}={(header or value)!r:.40}: {wrong}")
    for route in _cursor_routes(backend.task_id):
        if route[4] in ("v10", "jsonrpc-v10"):
            continue
        for good in GOOD_CURSORS:
            resp = _resume(client, route, backend.task_id, good, cut=False)
            if resp is not None and not resp.headers.get("content-type", "").startswith("text/event-stream"):
                tally.problems.append(
                    f"{route[0]} Last-Event-ID={good}: HTTP {resp.status_code} {resp.text[:200]}"
                )
    client.close()
    finish(backend, tally, "resume cursors")


# ---- REST: routes x hostile path ids, query values and bodies -----------------------------------------

BAD_IDS = ["nope", "9" * 400, "x" * 2000, "%00", "%FF", "%2e%2e", "%C3%A9", "a%2Fb", "%7Bid%7D", "%20", "-1"]
BAD_QUERY = [
    "",
    "-1",
    "1.5",
    "1e300",
    "9" * 400,
    "abc",
    "true",
    "null",
    "[]",
    "%00",
    "TASK_STATE_WORKING",
    "2026-13-45T99:99:99Z",
    "99999-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
]
LIST_KEYS = [
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
]
BAD_BODIES: list[bytes] = [
    *(dumps(v) for v in TYPED.values()),
    b"{",
    b"\xff\xfe",
    b"NaN",
    dumps({"message": None}),
    dumps({"message": []}),
    dumps({"message": {"messageId": 1, "role": [], "parts": {}}}),
    dumps({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [1, None, {"text": 5}]}}),
    dumps({"metadata": {"lastEventId": 1e300}}),
    dumps({"x": [[[[{"y": 1}]]]] * 3}),
    dumps({"deep": json.loads("[" * 150 + "]" * 150)}),
]
BAD_TYPES = [
    "text/plain",
    "application/xml",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin-1",
]


def _rest_routes() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(binding, HTTP method, path template, query keys) of every REST route, tenant forms included."""
    common = [
        ("POST", "/message:send", ()),
        ("POST", "/message:stream", ()),
        ("POST", "/tasks/{id}:cancel", ()),
        ("GET", "/tasks/{id}:subscribe", ()),
        ("POST", "/tasks/{id}:subscribe", ()),
        ("GET", "/tasks/{id}", ("historyLength",)),
        ("POST", "/tasks/{id}/pushNotificationConfigs", ()),
        ("GET", "/tasks/{id}/pushNotificationConfigs", ("pageSize", "pageToken")),
        ("GET", "/tasks/{id}/pushNotificationConfigs/{cid}", ()),
        ("DELETE", "/tasks/{id}/pushNotificationConfigs/{cid}", ()),
    ]
    routes = []
    for prefix in ("/a2a/rest", "/a2a/rest/acme"):
        routes += [("v10", m, prefix + p, q) for m, p, q in common]
        routes += [
            ("v10", "GET", prefix + "/tasks", tuple(LIST_KEYS)),
            ("v10", "GET", prefix + "/extendedAgentCard", ()),
        ]
    routes += [("v03", m, "/a2a/rest/v1" + p, q) for m, p, q in common]
    routes += [("v03", "GET", "/a2a/rest/v1/tasks", ()), ("v03", "GET", "/a2a/rest/v1/card", ())]
    routes += [
        ("alias", "GET", "/a2a/tasks", tuple(LIST_KEYS)),
        ("alias", "GET", "/a2a/tasks/{id}", ("historyLength",)),
        ("alias", "GET", "/a2a/tasks/{id}/pushNotificationConfig", ()),
        ("alias", "POST", "/a2a/tasks/{id}/pushNotificationConfig", ()),
    ]
    return routes


def rest_shape(binding: str, resp: httpx.Response) -> str | None:
    """None if `resp` is a success or an error in `binding`'s shape (never an internal error)."""
    if resp.status_code < 400:
        return None
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code} not JSON: {resp.text[:200]}"
    if binding == "v10":
        err = body.get("error") if isinstance(body, dict) else None
        ok = (
            isinstance(err, dict)
            and err.get("code") == resp.status_code
            and isinstance(err.get("status"), str)
            and isinstance(err.get("message"), str)
            and err["status"] != "INTERNAL"
        )
    else:
        ok = (
            isinstance(body, dict)
            and isinstance(body.get("code"), int)
            and isinstance(body.get("type"), str)
            and isinstance(body.get("message"), str)
            and body["type"] != "InternalError"
        )
    return None if ok else f"HTTP {resp.status_code} not a {binding} error: {resp.text[:200]}"


def test_every_rest_route_with_hostile_paths_queries_and_bodies(backend: Backend) -> None:
    tally = Tally()
    client = backend.client(tally)
    rejected: list[tuple[str, bytes | None]] = []

    def send(binding: str, verb: str, url: str, body: bytes | None = None, **headers: str) -> None:
        before = backend.db_state() if body is not None and verb == "POST" else None
        resp = client.request(verb, url, content=body, headers=headers)
        if resp is None:
            return
        if wrong := rest_shape(binding, resp):
            tally.problems.append(f"{verb} {url[:120]} body={body!r:.80}: {wrong}")
        elif before is not None and resp.status_code >= 400 and backend.db_state() != before:
            rejected.append((url, body))

    for binding, verb, template, query in _rest_routes():
        real = template.replace("{id}", backend.task_id).replace("{cid}", "c1")
        for bad in BAD_IDS:
            send(binding, verb, template.replace("{id}", bad).replace("{cid}", bad))
        for key in query:
            for value in BAD_QUERY:
                send(binding, verb, f"{real}?{key}={value}")
        if verb == "POST":
            for body in BAD_BODIES:
                send(binding, verb, real, body)
            for ctype in BAD_TYPES:
                send(binding, verb, real, b"{}", **{"Content-Type": ctype})
    for url, body in rejected:
        tally.problems.append(f"a rejected request changed the database: POST {url} {body!r:.100}")
    client.close()
    finish(backend, tally, "REST matrix")


# ---- hypothesis: JSON-RPC -----------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"x": value}
    return value


parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"kind": st.sampled_from(["text", "file", "data", "bogus"]), "text": scalars}),
        st.fixed_dictionaries({"text": st.text(max_size=30)}),
        json_values,
    ),
    max_size=4,
)
messages = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "kind": st.just("message"),
            "messageId": st.one_of(st.text(max_size=20), scalars),
            "role": st.sampled_from(["user", "agent", "ROLE_USER", "x", 1]),
            "parts": parts,
        },
        optional={
            "taskId": st.one_of(st.text(alphabet=string.hexdigits, max_size=32), scalars),
            "contextId": st.one_of(st.text(max_size=20), scalars),
            "metadata": st.one_of(json_values, st.integers(1, 300).map(deep)),
            "unknownField": json_values,
        },
    ),
)
params = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"message": messages},
        optional={"configuration": json_values, "metadata": json_values, "id": scalars, "extra": json_values},
    ),
    st.fixed_dictionaries(
        {"id": st.one_of(st.text(max_size=40), scalars)},
        optional={"historyLength": scalars, "metadata": st.fixed_dictionaries({"lastEventId": scalars})},
    ),
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2, None, ""]),
        "id": st.one_of(st.integers(), st.text(max_size=10), json_values),
        "method": st.one_of(st.sampled_from([*METHODS_V03, *METHODS_V10]), st.text(max_size=30), json_values),
        "params": params,
        "unexpected": json_values,
    },
)
bodies = st.one_of(
    envelopes.map(dumps),
    st.lists(envelopes, max_size=3).map(dumps),
    json_values.map(dumps),
    st.binary(max_size=64),
    st.integers(min_value=1, max_value=3000).map(lambda n: dumps(deep(n)) if n < 500 else b"[" * n),
    st.integers(min_value=1000, max_value=70_000).map(
        lambda n: orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"x": "y" * n}}
        )
    ),
)
headers = st.fixed_dictionaries(
    {},
    optional={
        "A2A-Version": st.sampled_from(["1.0", "0.3", "9", "", "1.x"]),
        "Content-Type": st.sampled_from(["application/json", "text/plain", "application/a2a+json"]),
        "Last-Event-ID": st.one_of(
            st.text(alphabet=string.printable.strip(), max_size=8), st.just("9" * 400)
        ),
    },
)


def test_jsonrpc_survives_anything(backend: Backend) -> None:
    tally = Tally()
    client = backend.client(tally)

    @settings(
        max_examples=JSONRPC_EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(body=bodies, extra=headers)
    def check(body: bytes, extra: dict[str, str]) -> None:
        before = backend.db_state()
        resp = client.post("/a2a/jsonrpc", content=body, headers=extra)
        if resp is None or resp.status_code in (204, 413, 415):
            return
        answers = rpc_answers(resp)
        if answers is None or not all(well_formed(a) for a in answers) or not answers:
            tally.problems.append(f"{body[:200]!r}: HTTP {resp.status_code} {resp.text[:200]}")
        elif any(a.get("error", {}).get("code") == -32603 for a in answers):
            tally.problems.append(f"{body[:200]!r}: an internal error for client input")
        elif all("error" in a for a in answers) and backend.db_state() != before:
            tally.problems.append(f"a rejected request changed the database: {body[:200]!r}")

    check()
    client.close()
    finish(backend, tally, "hypothesis JSON-RPC")


def test_jsonrpc_rejects_without_a_credential_whatever_the_body(backend: Backend) -> None:
    tally = Tally()
    client = CountingClient(backend.server.base_url, {}, tally)

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(body=bodies)
    def check(body: bytes) -> None:
        resp = client.post("/a2a/jsonrpc", content=body)
        if resp is not None and (
            resp.status_code not in (401, 413) or resp.json()["error"]["code"] not in (-32090, -32093)
        ):
            tally.problems.append(f"without a credential: HTTP {resp.status_code} {resp.text[:200]}")

    check()
    client.close()
    finish(backend, tally, "no credential")


# ---- schemathesis: REST --------------------------------------------------------------------------------

schema = schemathesis.openapi.from_dict(document())


def test_rest_survives_anything(backend: Backend) -> None:
    tally = Tally()
    client = backend.client(tally)

    def check(case: schemathesis.Case) -> None:
        binding = "v03" if case.operation.path.startswith(("/a2a/rest/v1/", "/a2a/tasks")) else "v10"
        kw = case.as_transport_kwargs(base_url=backend.server.base_url, headers=key_of("alice"))
        for name in ("Connection", "Authorization"):  # the credential is alice's key; keep-alive is ours
            kw["headers"].pop(name, None)
        body = dumps(kw["json"]) if "json" in kw else kw.get("data")
        before = backend.db_state()
        verb, url = kw["method"], kw["url"]
        resp = client.request(verb, url, params=kw.get("params"), headers=kw["headers"], content=body)
        if resp is None or resp.headers.get("content-type", "").startswith("text/event-stream"):
            return
        if wrong := rest_shape(binding, resp):
            tally.problems.append(f"{verb} {url[:120]}: {wrong}")
        elif resp.status_code >= 400 and backend.db_state() != before:
            tally.problems.append(f"a rejected request changed the database: {verb} {url}")

    for operation in schema.get_all_operations():
        run = settings(
            max_examples=REST_EXAMPLES,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )(given(case=operation.ok().as_strategy())(check))
        run()
    client.close()
    finish(backend, tally, "schemathesis REST")


def test_openapi_document_is_served_to_the_authenticated(backend: Backend) -> None:
    url = backend.server.base_url + "/a2a/rest/openapi.json"
    assert httpx.get(url, timeout=30).status_code == 401
    served = httpx.get(url, headers=key_of("bob"), timeout=30).json()
    assert served == orjson.loads(orjson.dumps(document()))


def test_totals_and_a_clean_server_log(backend: Backend) -> None:
    """Last: every request this module sent to the backend, and a log without any traceback."""
    backend.say(backend.tally.line(f"fuzz totals [{backend.name}]"))
    log = backend.log.read_text()
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]
    assert backend.tally.server_errors == 0 and backend.tally.dropped == 0
