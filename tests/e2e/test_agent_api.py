"""The agent API (`app.agents.sdk`) through the A2A API: every capability, in both protocol versions, on
streaming and non-streaming calls, served by a real server running `tests.support.agents.capabilities`."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.conftest import make_server
from tests.support.rpc import sse_data
from tests.support.server import ServerProcess

AGENT = "tests.support.agents.capabilities:CapabilitiesAgent"
VERSIONS = ("0.3", "1.0")
MODES = ("send", "stream")
KINDS_V10 = {
    "task": "task",
    "message": "message",
    "statusUpdate": "status-update",
    "artifactUpdate": "artifact-update",
}
TERMINAL = {"completed", "failed", "canceled", "rejected"}
STOPS = TERMINAL | {"input-required", "auth-required"}


@pytest.fixture(scope="module")
async def agent_server(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("agent-api"),
        AGENT_ADAPTER=AGENT,
        AGENT_OPTIONS='{"greeting": "hi"}',
    )
    yield srv
    srv.stop()


@pytest.fixture
async def http(agent_server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=agent_server.base_url, timeout=30) as c:
        yield c


# ---- one vocabulary for both wire versions ---------------------------------------------------------


def state_of(v: str, state: str) -> str:
    if v == "0.3":
        return state
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


def part_in(v: str, part: dict[str, Any]) -> dict[str, Any]:
    """A part as the test writes it ({"text"} | {"bytes", "mime", "name"} | {"uri", ...} | {"data"})."""
    if v == "0.3":
        if "text" in part:
            return {"kind": "text", "text": part["text"]}
        if "data" in part:
            return {"kind": "data", "data": part["data"]}
        f = {"mimeType": part["mime"], "name": part["name"]}
        f |= {"bytes": part["bytes"]} if "bytes" in part else {"uri": part["uri"]}
        return {"kind": "file", "file": f}
    if "text" in part or "data" in part:
        return dict(part)
    out = {"mediaType": part["mime"], "filename": part["name"]}
    return out | ({"raw": part["bytes"]} if "bytes" in part else {"url": part["uri"]})


def part_out(v: str, part: dict[str, Any]) -> dict[str, Any]:
    """A part as the server wrote it, in the test's vocabulary."""
    if v == "0.3":
        if part["kind"] != "file":
            return {k: part[k] for k in ("text", "data") if k in part}
        f = part["file"]
        out = {"mime": f.get("mimeType"), "name": f.get("name")}
        return out | ({"bytes": f["bytes"]} if "bytes" in f else {"uri": f["uri"]})
    if "raw" in part or "url" in part:
        out = {"mime": part.get("mediaType"), "name": part.get("filename")}
        return out | ({"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]})
    return {k: part[k] for k in ("text", "data") if k in part}


def message_in(v: str, parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "messageId": str(uuid.uuid4()),
        "role": "user" if v == "0.3" else "ROLE_USER",
        "parts": [part_in(v, p) for p in parts],
    }
    if v == "0.3":
        m["kind"] = "message"
    return m | fields


def event_of(v: str, ev: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if v == "0.3":
        return ev["kind"], ev
    ((key, body),) = ev.items()
    return KINDS_V10[key], body


def text_of(v: str, message: dict[str, Any] | None) -> str:
    if not message:
        return ""
    return "".join(p.get("text", "") for p in message["parts"])


async def rpc(http: httpx.AsyncClient, v: str, method: str, params: Any, headers: dict | None = None) -> dict:
    names = {
        "send": ("message/send", "SendMessage"),
        "get": ("tasks/get", "GetTask"),
        "cancel": ("tasks/cancel", "CancelTask"),
        "list": (None, "ListTasks"),
    }
    name = names[method][v == "1.0"]
    hdrs = ({"A2A-Version": "1.0"} if v == "1.0" else {}) | (headers or {})
    body = {"jsonrpc": "2.0", "id": 1, "method": name, "params": params}
    resp = await http.post("/a2a/jsonrpc", json=body, headers=hdrs)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def get_task(http: httpx.AsyncClient, v: str, task_id: str) -> dict[str, Any]:
    data = await rpc(http, v, "get", {"id": task_id})
    return data["result"]


class Outcome:
    """What a send produced: a direct message, or a task (and, when streamed, its events)."""

    def __init__(self, v: str, kind: str, body: dict[str, Any], events: list[tuple[str, dict]]) -> None:
        self.v, self.kind, self.body, self.events = v, kind, body, events

    @property
    def state(self) -> str:
        return state_of(self.v, self.body["status"]["state"])

    @property
    def status_text(self) -> str:
        return text_of(self.v, self.body["status"].get("message"))

    def artifact(self, name: str) -> dict[str, Any]:
        return next(a for a in self.body.get("artifacts", []) if a.get("name") == name)

    def artifact_parts(self, name: str) -> list[dict[str, Any]]:
        return [part_out(self.v, p) for p in self.artifact(name)["parts"]]

    def artifact_text(self, name: str) -> str:
        return "".join(p.get("text", "") for p in self.artifact_parts(name))


async def send(
    http: httpx.AsyncClient,
    v: str,
    mode: str,
    parts: list[dict[str, Any]] | str,
    headers: dict | None = None,
    **fields: Any,
) -> Outcome:
    """Send one message by `message/send` (blocking) or `message/stream`, in wire version `v`."""
    if isinstance(parts, str):
        parts = [{"text": parts}]
    params = {"message": message_in(v, parts, **fields)}
    if mode == "send":
        data = await rpc(http, v, "send", params, headers)
        assert "error" not in data, data
        result = data["result"]
        if v == "0.3":
            return Outcome(v, result["kind"], result, [])
        ((kind, body),) = result.items()
        return Outcome(v, kind, body, [])
    events = await stream(http, v, params, headers)
    kind, body = events[0]
    if kind == "message":
        return Outcome(v, kind, body, events)
    return Outcome(v, "task", await get_task(http, v, body["id"]), events)


async def stream(
    http: httpx.AsyncClient, v: str, params: Any, headers: dict | None = None
) -> list[tuple[str, dict[str, Any]]]:
    method = "message/stream" if v == "0.3" else "SendStreamingMessage"
    hdrs = ({"A2A-Version": "1.0"} if v == "1.0" else {}) | (headers or {})
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    events: list[tuple[str, dict[str, Any]]] = []
    async with aconnect_sse(http, "POST", "/a2a/jsonrpc", json=body, headers=hdrs) as src:
        async for sse in src.aiter_sse():
            if not sse.data:
                continue  # a keep-alive
            data = json.loads(sse.data)
            assert "error" not in data, data
            kind, ev = event_of(v, data["result"])
            events.append((kind, ev))
            if kind == "status-update" and state_of(v, ev["status"]["state"]) in STOPS:
                break  # the stream stays open through input-required; this is where a client stops
    return events


def statuses(out: Outcome) -> list[tuple[str, str]]:
    return [
        (state_of(out.v, e["status"]["state"]), text_of(out.v, e["status"].get("message")))
        for k, e in out.events
        if k == "status-update"
    ]


both = pytest.mark.parametrize(("v", "mode"), [(v, m) for v in VERSIONS for m in MODES])


# ---- the capabilities ------------------------------------------------------------------------------


@both
async def test_text_streams_into_the_response_and_returning_completes(http, v, mode):
    out = await send(http, v, mode, "say:hello there")
    assert out.kind == "task" and out.state == "completed"
    assert out.artifact_text("assistant-response") == "hello there"
    if mode == "stream":
        (chunk,) = [e for k, e in out.events if k == "artifact-update"]
        assert chunk["artifact"]["name"] == "assistant-response" and chunk.get("lastChunk") is True
        assert statuses(out)[-1][0] == "completed"


@both
async def test_chunked_artifact_with_name_description_and_metadata(http, v, mode):
    out = await send(http, v, mode, "chunks:3")
    assert out.state == "completed"
    art = out.artifact("numbers")
    assert out.artifact_text("numbers") == "0;1;2;"
    assert art["description"] == "counted in chunks" and art["metadata"] == {"total": 3}
    if mode == "stream":
        chunks = [e for k, e in out.events if k == "artifact-update"]
        assert [bool(c.get("append")) for c in chunks] == [False, True, True]
        assert [bool(c.get("lastChunk")) for c in chunks] == [False, False, True]
        assert len({c["artifact"]["artifactId"] for c in chunks}) == 1


@both
async def test_file_artifact_by_bytes(http, v, mode):
    out = await send(http, v, mode, "file-bytes")
    (part,) = out.artifact_parts("table")
    assert part["mime"] == "text/csv" and part["name"] == "table.csv"
    assert base64.b64decode(part["bytes"]) == b"a,b\n1,2\n"


@both
async def test_file_artifact_by_url(http, v, mode):
    out = await send(http, v, mode, "file-url")
    assert out.artifact_parts("image") == [
        {"mime": "image/png", "name": "r.png", "uri": "https://example.com/r.png"}
    ]


@both
async def test_data_artifact(http, v, mode):
    out = await send(http, v, mode, "data")
    assert out.artifact_parts("json") == [{"data": {"answer": 42}}]


@both
async def test_working_status_with_a_message(http, v, mode):
    out = await send(http, v, mode, "working:reading the code")
    assert out.state == "completed"
    if mode == "stream":
        # The agent's first emission is its own `working`: the runner adds no second one before it.
        assert [s for s in statuses(out) if s[0] == "working"] == [("working", "reading the code")]
    transitions = [state_of(v, t["state"]) for t in out.body["metadata"]["stateTransitions"]]
    assert transitions == ["submitted", "working", "completed"]


@both
async def test_ask_returns_the_users_next_message_in_the_same_run(http, v, mode):
    out = await send(http, v, mode, "ask:Which branch?")
    assert out.state == "input-required" and out.status_text == "Which branch?"
    reply = [{"text": "main"}, {"data": {"force": False}}]
    done = await send(http, v, mode, reply, taskId=out.body["id"], contextId=out.body["contextId"])
    assert done.state == "completed"
    assert done.artifact_text("assistant-response") == 'answer:main data:{"force": false}'


@both
async def test_auth_required_then_the_answer(http, v, mode):
    out = await send(http, v, mode, "auth")
    assert out.state == "auth-required" and out.status_text == "Sign in first"
    assert part_out(v, out.body["status"]["message"]["parts"][1]) == {"data": {"scheme": "bearer"}}
    done = await send(http, v, mode, "tok-123", taskId=out.body["id"])
    assert done.state == "completed" and done.artifact_text("assistant-response") == "token:tok-123"


@pytest.mark.parametrize(
    ("text", "state", "reason"),
    [
        ("done:all good", "completed", "all good"),
        ("fail:no tests found", "failed", "no tests found"),
        ("reject:not a coding task", "rejected", "not a coding task"),
        ("raise", "failed", "The agent failed: ValueError: the agent raised"),
    ],
)
@both
async def test_endings_carry_their_message(http, v, mode, text, state, reason):
    out = await send(http, v, mode, text)
    assert out.state == state and out.status_text == reason
    stamps = [t["timestamp"] for t in out.body["metadata"]["stateTransitions"]]
    assert stamps == sorted(stamps), "transitions are recorded in time order"
    if mode == "stream":
        assert statuses(out)[-1] == (state, reason)


@both
async def test_direct_message_reply_creates_no_task(http, v, mode):
    context = str(uuid.uuid4())
    out = await send(http, v, mode, "reply:bob", contextId=context)
    assert out.kind == "message"
    assert out.body["role"] == ("agent" if v == "0.3" else "ROLE_AGENT")
    assert out.body["contextId"] == context and "taskId" not in out.body
    assert [part_out(v, p) for p in out.body["parts"]] == [{"text": "hi, bob"}, {"data": {"direct": True}}]
    if mode == "stream":
        assert len(out.events) == 1
    listed = await rpc(http, "1.0", "list", {"contextId": context})
    assert listed["result"]["tasks"] == []


@both
async def test_media_type_the_agent_does_not_accept_is_refused_before_it_runs(http, v, mode):
    context = str(uuid.uuid4())
    zipped = {"bytes": base64.b64encode(b"PK").decode(), "mime": "application/zip", "name": "a.zip"}
    params = {"message": message_in(v, [{"text": "say:x"}, zipped], contextId=context)}
    if mode == "send":
        data = await rpc(http, v, "send", params)
    else:
        method = "message/stream" if v == "0.3" else "SendStreamingMessage"
        hdrs = {"A2A-Version": "1.0"} if v == "1.0" else {}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        resp = await http.post("/a2a/jsonrpc", json=body, headers=hdrs)
        # v0.3 answers a stream's early error as the stream's one event; v1.0 as a plain response.
        (data,) = sse_data(resp.text) if v == "0.3" else (resp.json(),)
    assert data["error"]["code"] == -32005
    assert "application/zip" in data["error"]["message"]
    listed = await rpc(http, "1.0", "list", {"contextId": context})
    assert listed["result"]["tasks"] == [], "nothing was stored"


@both
async def test_accepted_files_and_data_reach_the_agent(http, v, mode):
    png = {"bytes": base64.b64encode(b"\x89PNG....").decode(), "mime": "image/png", "name": "shot.png"}
    linked = {"uri": "https://example.com/a.png", "mime": "image/png", "name": "a.png"}
    out = await send(http, v, mode, [{"text": "files"}, png, linked, {"data": {"k": [1, 2]}}])
    (seen,) = out.artifact_parts("parts")
    assert [(p["kind"], p["mediaType"], p["name"], p["size"], p["url"]) for p in seen["data"]["parts"]] == [
        ("text", None, None, None, None),
        ("file", "image/png", "shot.png", 8, None),
        ("file", "image/png", "a.png", None, "https://example.com/a.png"),
        ("data", None, None, None, None),
    ]
    assert seen["data"]["parts"][3]["data"] == {"k": [1, 2]}


@both
async def test_the_agent_sees_principal_ids_extensions_metadata_and_options(http, v, mode):
    header = "A2A-Extensions" if v == "1.0" else "X-A2A-Extensions"
    uri = "https://example.com/ext/trace/v1"
    out = await send(
        http,
        v,
        mode,
        "whoami",
        headers={header: uri},
        metadata={"ticket": "T-1"},
        extensions=["https://example.com/ext/msg/v1"],
    )
    (seen,) = out.artifact_parts("whoami")
    info = seen["data"]
    assert info["principal"] == "anonymous"
    assert info["taskId"] == out.body["id"] and info["contextId"] == out.body["contextId"]
    assert info["extensions"] == [uri, "https://example.com/ext/msg/v1"]
    assert info["metadata"] == {"ticket": "T-1"}
    assert info["history"] == 0 and info["greeting"] == "hi"


@both
async def test_cancel_racing_emissions_applies_nothing_after_canceled(http, v, mode):
    """The agent emits without pause; after the cancel nothing more is applied, and it stops."""
    params = {"message": message_in(v, [{"text": "spin"}])}
    if mode == "send":
        params["configuration"] = {"blocking": False} if v == "0.3" else {"returnImmediately": True}
        data = await rpc(http, v, "send", params)
        body = data["result"] if v == "0.3" else data["result"]["task"]
        task_id = body["id"]
        async with asyncio.timeout(60):
            while not (await get_task(http, v, task_id)).get("artifacts"):
                await asyncio.sleep(0.02)
        canceled = (await rpc(http, v, "cancel", {"id": task_id}))["result"]
        assert state_of(v, canceled["status"]["state"]) == "canceled"
    else:
        method = "message/stream" if v == "0.3" else "SendStreamingMessage"
        hdrs = {"A2A-Version": "1.0"} if v == "1.0" else {}
        req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        seen: list[tuple[str, dict]] = []
        async with aconnect_sse(http, "POST", "/a2a/jsonrpc", json=req, headers=hdrs) as src:
            async for sse in src.aiter_sse():
                if not sse.data:
                    continue
                seen.append(event_of(v, json.loads(sse.data)["result"]))
                if seen[-1][0] == "task":
                    task_id = seen[-1][1]["id"]
                if seen[-1][0] == "artifact-update" and len(seen) == 3:
                    canceled = (await rpc(http, v, "cancel", {"id": task_id}))["result"]
                    assert state_of(v, canceled["status"]["state"]) == "canceled"
        kind, last = seen[-1]
        assert kind == "status-update" and state_of(v, last["status"]["state"]) == "canceled"
    first = await get_task(http, v, task_id)
    # Once the run has ended nothing more can be applied: then the task is proved unchanged, not after a
    # guessed pause.
    async with asyncio.timeout(60):
        while (await http.get("/healthz")).json()["runningAgents"]:
            await asyncio.sleep(0.05)
    later = await get_task(http, v, task_id)
    assert state_of(v, later["status"]["state"]) == "canceled"
    assert later["artifacts"] == first["artifacts"], "an emission after the cancel was applied"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/a2a/rest/message:send", {"role": "ROLE_USER", "parts": [{"text": "reply:rest"}]}),
        ("/a2a/rest/v1/message:send", {"role": "ROLE_USER", "content": [{"text": "reply:rest"}]}),
    ],
)
async def test_direct_reply_over_rest(http, path, message):
    body = {"message": {"messageId": str(uuid.uuid4()), **message}}
    resp = await http.post(path, json=body)
    assert resp.status_code == 200, resp.text
    ((key, reply),) = resp.json().items()
    assert key == "message" and reply["role"] == "ROLE_AGENT"
    parts = reply.get("parts") or reply.get("content")
    assert parts[0] == {"text": "hi, rest"}


async def test_the_card_comes_from_the_agent(http):
    card = (await http.get("/.well-known/agent-card.json")).json()
    assert card["name"] == "Capabilities Test Agent"
    assert card["defaultInputModes"] == ["text/plain", "application/json", "image/*"]
    (skill,) = card["skills"]
    assert skill["id"] == "capabilities" and skill["examples"] == ["chunks:3"]
    assert skill["inputModes"] == ["text/plain", "image/png"]
    assert skill["outputModes"] == ["text/plain", "application/json", "text/csv"]
