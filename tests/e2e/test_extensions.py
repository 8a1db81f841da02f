"""A2A extensions over a real server, every binding and both versions, on both databases.

The server runs two roles: `coder` (the default; `ExtensionsAgent`, which declares one required and one
optional extension through the agent API) and `reviewer` (at /agents/reviewer; `CapabilitiesAgent`, none
of its own), with CARD_EXTENSIONS adding one required and one optional extension to both, API keys and an
extended card, and gRPC. A call that does not name every required extension is refused: -32008 with the
missing URIs in `data` (v0.3) or the ErrorInfo metadata `extensions` (v1.0), HTTP 400 (REST, both
versions, and the aliases), gRPC FAILED_PRECONDITION with the ErrorInfo; a call that does is served, the
extensions it activated (requested and declared) are echoed (`A2A-Extensions`, plus `X-A2A-Extensions`
when asked under that name; gRPC initial metadata) and the agent sees them. Card fetches, public and
extended, never need one. The official clients: tests/interop/test_interop_extensions.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from tests.conftest import BACKENDS, make_server
from tests.support.agents.capabilities import AGENT_OPTIONAL, AGENT_REQUIRED
from tests.support.auth import KEYS, api_keys_env
from tests.support.rpc import sse_data
from tests.support.server import ServerProcess, free_port

OP_REQUIRED = "https://example.com/ext/operator-required/v1"
OP_OPTIONAL = "https://example.com/ext/operator-optional/v1"
UNKNOWN = "https://example.com/ext/unknown/v1"
CARD_EXTENSIONS = [
    {"uri": OP_REQUIRED, "description": "The operator requires it", "required": True},
    {"uri": OP_OPTIONAL, "params": {"level": "high"}},
]
AGENTS = {
    "coder": {"adapter": "tests.support.agents.capabilities:ExtensionsAgent"},
    "reviewer": {"adapter": "tests.support.agents.capabilities:CapabilitiesAgent"},
}
SKILLS = '[{"id": "admin", "name": "Admin", "description": "Only for signed-in callers", "tags": ["x"]}]'
ALICE = {"X-API-Key": KEYS["alice"]}
# Per role: what the card declares (in order), what a call must name, what a full request activates.
DECLARED = {
    "coder": [AGENT_REQUIRED, AGENT_OPTIONAL, OP_REQUIRED, OP_OPTIONAL],
    "reviewer": [OP_REQUIRED, OP_OPTIONAL],
}
REQUIRED = {"coder": [AGENT_REQUIRED, OP_REQUIRED], "reviewer": [OP_REQUIRED]}
PREFIX = {"coder": "", "reviewer": "/agents/reviewer"}
ROLES = ("coder", "reviewer")


@pytest.fixture(scope="module", params=BACKENDS)
async def ext_server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    port = free_port()
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"extensions-{request.param}"),
        **api_keys_env(
            AGENTS=json.dumps(AGENTS),
            CARD_EXTENSIONS=json.dumps(CARD_EXTENSIONS),
            EXTENDED_CARD_SKILLS=SKILLS,
            GRPC_PORT=str(port),
        ),
    )
    srv.grpc_port = port  # type: ignore[attr-defined]
    yield srv
    srv.stop()


@pytest.fixture
async def http(ext_server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=ext_server.base_url, timeout=30, headers=ALICE) as c:
        yield c


# ---- the operations, per binding and version ---------------------------------------------------------

BINDINGS = ("jsonrpc-0.3", "jsonrpc-1.0", "rest-0.3", "rest-1.0")


def _message(binding: str, text: str) -> dict[str, Any]:
    if binding.endswith("0.3"):
        parts = [{"kind": "text", "text": text}] if binding.startswith("jsonrpc") else [{"text": text}]
        key = "parts" if binding.startswith("jsonrpc") else "content"
        role = "user" if binding.startswith("jsonrpc") else "ROLE_USER"
        return {"messageId": str(uuid.uuid4()), "role": role, key: parts} | (
            {"kind": "message"} if binding.startswith("jsonrpc") else {}
        )
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}


class Outcome:
    """One answered call: HTTP status, headers, the error (code or reason, and the missing URIs) or the
    result (a task or the events of a stream)."""

    def __init__(self, resp: httpx.Response, binding: str) -> None:
        self.status = resp.status_code
        self.echo = resp.headers.get("a2a-extensions")
        self.legacy_echo = resp.headers.get("x-a2a-extensions")
        self.code: int | None = None
        self.missing: str | None = None
        self.body: Any = None
        if resp.headers["content-type"].startswith("text/event-stream"):
            events = sse_data(resp.text)
            if binding.startswith("jsonrpc"):
                if "error" in events[0]:
                    self._jsonrpc_error(events[0]["error"])
                    return
                events = [e["result"] for e in events]
            self.body = events
            return
        data = resp.json()
        if binding.startswith("jsonrpc"):
            if "error" in data:
                self._jsonrpc_error(data["error"])
            else:
                self.body = data["result"]
        elif resp.status_code >= 400:
            if binding == "rest-1.0" or "error" in data:
                (info,) = data["error"]["details"]
                assert info["reason"] == "EXTENSION_SUPPORT_REQUIRED", data
                self.code, self.missing = -32008, info["metadata"]["extensions"]
            else:
                self.code = data["code"]
                assert data["type"] == "ExtensionSupportRequiredError", data
        else:
            self.body = data

    def _jsonrpc_error(self, error: dict[str, Any]) -> None:
        self.code = error["code"]
        data = error.get("data")
        if isinstance(data, list):
            (info,) = data
            assert info["reason"] == "EXTENSION_SUPPORT_REQUIRED", error
            self.missing = info["metadata"]["extensions"]
        else:
            self.missing = data["extensions"]

    @property
    def task(self) -> dict[str, Any]:
        body = self.body
        if isinstance(body, list):
            body = body[0]
        return body.get("task", body)


async def send(
    http: httpx.AsyncClient, binding: str, role: str, text: str, headers: dict[str, str], stream: bool = False
) -> Outcome:
    prefix = PREFIX[role]
    message = _message(binding, text)
    if binding.startswith("jsonrpc"):
        v10 = binding.endswith("1.0")
        method = (
            ("SendStreamingMessage" if stream else "SendMessage")
            if v10
            else ("message/stream" if stream else "message/send")
        )
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
        hdrs = {**headers, **({"A2A-Version": "1.0"} if v10 else {})}
        resp = await http.post(f"{prefix}/a2a/jsonrpc", json=body, headers=hdrs)
    else:
        path = "/a2a/rest/v1" if binding.endswith("0.3") else "/a2a/rest"
        verb = "message:stream" if stream else "message:send"
        hdrs = {**headers, **({"A2A-Version": "1.0"} if binding.endswith("1.0") else {})}
        resp = await http.post(f"{prefix}{path}/{verb}", json={"message": message}, headers=hdrs)
    return Outcome(resp, binding)


async def get_task(
    http: httpx.AsyncClient, binding: str, role: str, task_id: str, headers: dict[str, str]
) -> Outcome:
    prefix = PREFIX[role]
    if binding.startswith("jsonrpc"):
        v10 = binding.endswith("1.0")
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "GetTask" if v10 else "tasks/get",
            "params": {"id": task_id},
        }
        resp = await http.post(
            f"{prefix}/a2a/jsonrpc", json=body, headers={**headers, **({"A2A-Version": "1.0"} if v10 else {})}
        )
    else:
        path = "/a2a/rest/v1" if binding.endswith("0.3") else "/a2a/rest"
        resp = await http.get(f"{prefix}{path}/tasks/{task_id}", headers=headers)
    return Outcome(resp, binding)


def named(uris: list[str], legacy: bool = False) -> dict[str, str]:
    return {("X-A2A-Extensions" if legacy else "A2A-Extensions"): ", ".join(uris)}


# ---- the card: declared everywhere, fetched without any extension ------------------------------------


@pytest.mark.parametrize("role", ROLES)
async def test_every_card_variant_declares_the_extensions_and_needs_none(http, ext_server, role):
    prefix = PREFIX[role]
    for headers in ({}, {"A2A-Version": "1.0"}, {"A2A-Version": "0.3"}):
        resp = await http.get(f"{prefix}/.well-known/agent-card.json", headers=headers)
        assert resp.status_code == 200
        exts = resp.json()["capabilities"]["extensions"]
        assert [e["uri"] for e in exts if e["uri"] != "urn:a2a-coding-server:role"] == DECLARED[role]
        assert [e["uri"] for e in exts if e["required"]] == REQUIRED[role]
        assert {e["uri"]: e.get("params") for e in exts}[OP_OPTIONAL] == {"level": "high"}
    # The extended card, by every binding that serves it: no extension named, none needed.
    extended = [
        await http.get(f"{prefix}/a2a/rest/extendedAgentCard", headers={"A2A-Version": "1.0"}),
        await http.get(f"{prefix}/a2a/rest/v1/card"),
    ]
    for method, version in (
        ("agent/getAuthenticatedExtendedCard", {}),
        ("GetExtendedAgentCard", {"A2A-Version": "1.0"}),
    ):
        resp = await http.post(
            f"{prefix}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method}, headers=version
        )
        extended.append(resp)
    for resp in extended:
        assert resp.status_code == 200, resp.text
        body = resp.json()
        card = body.get("result", body)
        exts = card["capabilities"]["extensions"]
        assert [e["uri"] for e in exts if e["required"]] == REQUIRED[role], card
        assert "admin" in [s["id"] for s in card["skills"]]


# ---- refused without a required extension -----------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_call_missing_a_required_extension_is_refused_naming_it(http, binding, role):
    rest = binding.startswith("rest")
    want_status = 400 if rest else 200
    cases = [
        ({}, REQUIRED[role]),
        (named([OP_OPTIONAL, UNKNOWN]), REQUIRED[role]),
        (named(REQUIRED[role][:1]), REQUIRED[role][1:]),
    ]
    for headers, missing in cases:
        if not missing:
            continue
        for stream in (False, True):
            out = await send(http, binding, role, "whoami", headers, stream)
            assert (out.status, out.code) == (want_status, -32008), (binding, headers, out.body)
            if out.missing is not None or not binding.startswith("rest-0.3"):
                assert out.missing == ",".join(missing)
            assert out.echo is None and out.legacy_echo is None
        out = await get_task(http, binding, role, "no-such-task", headers)
        assert (out.status, out.code) == (want_status, -32008), "checked before the task is looked up"


@pytest.mark.parametrize("role", ROLES)
async def test_the_aliases_and_list_tasks_are_refused_too(http, role):
    prefix = PREFIX[role]
    for path in ("/a2a/tasks", "/a2a/tasks/nope", "/a2a/rest/tasks", "/a2a/rest/v1/tasks"):
        resp = await http.get(
            prefix + path, headers={"A2A-Version": "1.0"} if path == "/a2a/rest/tasks" else {}
        )
        assert resp.status_code == 400, (path, resp.text)
        assert "ExtensionSupportRequired" in resp.text or "EXTENSION_SUPPORT_REQUIRED" in resp.text


# ---- served with them: echoed, and the agent sees what was activated --------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("legacy", [False, True], ids=["A2A-Extensions", "X-A2A-Extensions"])
async def test_a_call_naming_them_is_served_echoed_and_the_agent_sees_them(http, binding, role, legacy):
    asked = [UNKNOWN, *REQUIRED[role], OP_OPTIONAL, AGENT_OPTIONAL]
    active = [u for u in asked if u in DECLARED[role]]
    for stream in (False, True):
        out = await send(http, binding, role, "whoami", named(asked, legacy), stream)
        assert out.status == 200 and out.code is None, (binding, out.missing)
        assert out.echo == ",".join(active)
        assert out.legacy_echo == (",".join(active) if legacy else None)
        if stream:
            events = out.body
            artifacts = [e for e in events if "artifactUpdate" in e or e.get("kind") == "artifact-update"]
            artifact = artifacts[0].get("artifactUpdate", artifacts[0])["artifact"]
        else:
            (artifact,) = [a for a in out.task["artifacts"] if a.get("name") == "whoami"]
        part = (artifact.get("parts") or artifact.get("content"))[0]
        info = part["data"] if "data" in part and "data" not in part["data"] else part["data"]["data"]
        assert info["activeExtensions"] == active
        assert info["extensions"][: len(asked)] == asked, "what was requested, as before"
        task_id = out.task.get("id") or out.task.get("taskId")
    out = await get_task(http, binding, role, task_id, named(REQUIRED[role], legacy))
    assert out.status == 200 and out.echo == ",".join(REQUIRED[role])


# ---- gRPC, both versions ------------------------------------------------------------------------------


def _grpc_call(
    ext_server: ServerProcess, version: str, method: str, request: Any, metadata: list[tuple[str, str]]
):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{ext_server.grpc_port}")  # type: ignore[attr-defined]
    stub = (a2a_pb2_grpc.A2AServiceStub if version == "1.0" else a2a_v0_3_pb2_grpc.A2AServiceStub)(channel)
    return channel, getattr(stub, method)(request, metadata=[("x-api-key", KEYS["alice"]), *metadata])


def _grpc_message(version: str, text: str) -> Any:
    if version == "1.0":
        return a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(
                message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)]
            )
        )
    return a2a_v0_3_pb2.SendMessageRequest(
        request=a2a_v0_3_pb2.Message(
            message_id=str(uuid.uuid4()), role=a2a_v0_3_pb2.ROLE_USER, content=[a2a_v0_3_pb2.Part(text=text)]
        )
    )


def _error_info(err: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    raw = dict(err.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    return info


def _role_metadata(role: str) -> list[tuple[str, str]]:
    return [("a2a-role", role)] if role != "coder" else []


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_grpc_refuses_without_and_echoes_with(ext_server, version, role):
    for method in ("SendMessage", "SendStreamingMessage"):
        channel, call = _grpc_call(
            ext_server, version, method, _grpc_message(version, "whoami"), _role_metadata(role)
        )
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                if method == "SendMessage":
                    await call
                else:
                    async for _ in call:
                        pass
        err = caught.value
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        info = _error_info(err)
        assert (info.reason, info.metadata["extensions"]) == (
            "EXTENSION_SUPPORT_REQUIRED",
            ",".join(REQUIRED[role]),
        )
        if version == "0.3":
            assert err.details().startswith("ExtensionSupportRequiredError: ")

    asked = [*REQUIRED[role], OP_OPTIONAL, UNKNOWN]
    active = ",".join(u for u in asked if u in DECLARED[role])
    for key in ("a2a-extensions", "x-a2a-extensions"):
        metadata = [*_role_metadata(role), (key, ",".join(asked))]
        channel, call = _grpc_call(
            ext_server, version, "SendMessage", _grpc_message(version, "whoami"), metadata
        )
        async with channel:
            response = await call
            initial = dict(await call.initial_metadata())
        assert initial["a2a-extensions"] == active
        assert initial.get("x-a2a-extensions") == (active if key == "x-a2a-extensions" else None)
        task = json_format.MessageToDict(response)["task"]
        (artifact,) = [a for a in task["artifacts"] if a.get("name") == "whoami"]
        part = (artifact.get("parts") or artifact.get("content"))[0]
        data = part["data"] if version == "1.0" else part["data"]["data"]
        assert data["activeExtensions"] == active.split(",")

        channel, call = _grpc_call(
            ext_server, version, "SendStreamingMessage", _grpc_message(version, "whoami"), metadata
        )
        async with channel:
            items = [item async for item in call]
            initial = dict(await call.initial_metadata())
        assert items and initial["a2a-extensions"] == active


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_grpc_card_fetches_need_no_extension(ext_server, version):
    if version == "1.0":
        channel, call = _grpc_call(
            ext_server, version, "GetExtendedAgentCard", a2a_pb2.GetExtendedAgentCardRequest(), []
        )
    else:
        channel, call = _grpc_call(
            ext_server, version, "GetAgentCard", a2a_v0_3_pb2.GetAgentCardRequest(), []
        )
    async with channel:
        card = await call
    assert [e.uri for e in card.capabilities.extensions if e.required] == REQUIRED["coder"]
