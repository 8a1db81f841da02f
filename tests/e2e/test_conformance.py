"""What real clients and outside conformance checkers send, accepted (issue #12), on both databases.

- One trailing slash on any API route answers as without it; nothing answers 3xx (raw HTTP, and the
  official Python client on interface URLs that end in `/`).
- v1.0 input is ProtoJSON: each field by its JSON name or its proto name (`history_length`), at every
  level, in JSON-RPC params, REST bodies and REST query strings; both spellings with different values is
  InvalidParams; free-form `metadata` and `data` keep their keys; output stays camelCase.
- The card by version: hybrid by default, v1.0-only for `A2A-Version: 1.0` (a strict v1.0 schema parse
  accepts it), `Vary: A2A-Version` and an ETag per variant; the extended card likewise; CARD_COMPAT=1.0.
- An agent whose first emission is `working` shows one `working`, not the runner's and its own.

Media types (item 4) are in test_rest.py, v0.3 stream errors as a stream (item 6) in test_streaming.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types import AgentCard, Role, SendMessageConfiguration, SendMessageRequest, TaskState
from google.protobuf.json_format import ParseDict, ParseError

from tests.conftest import BACKENDS, make_server
from tests.interop.test_interop_js import Variant as JsVariant, node, run_interop  # noqa: F401 - `node`: the fixture, by name
from tests.support.auth import key_of

V10 = {"A2A-Version": "1.0"}
REST = "/a2a/rest"
WAIT_S = 30


def v10_message(text: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}], **fields}


async def rpc(client: httpx.AsyncClient, method: str, params: Any, path: str = "/a2a/jsonrpc") -> dict:
    """One v1.0 JSON-RPC call; the whole response object."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = await client.post(path, json=body, headers=V10)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def rpc_result(client: httpx.AsyncClient, method: str, params: Any) -> Any:
    data = await rpc(client, method, params)
    assert "error" not in data, data
    return data["result"]


async def completed_task(client: httpx.AsyncClient) -> dict[str, Any]:
    return (await rpc_result(client, "SendMessage", {"message": v10_message("say:done")}))["task"]


# ---- 1. trailing slashes ----------------------------------------------------------------------------


def routes(tid: str) -> list[tuple[str, str, dict[str, Any] | None, dict[str, str]]]:
    """(method, path, JSON body, headers): one request of every route family, `tid` a finished task."""
    get_v03 = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": tid}}
    get_v10 = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": tid}}
    v03_rest_msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": "say:x"}]}
    return [
        ("POST", "/a2a/jsonrpc", get_v03, {}),
        ("POST", "/a2a/jsonrpc", get_v10, V10),
        ("POST", "/a2a", get_v03, {}),
        ("POST", f"{REST}/message:send", {"message": v10_message("say:x")}, {}),
        ("POST", f"{REST}/message:stream", {"message": v10_message("say:x")}, {}),
        ("GET", f"{REST}/tasks", None, {}),
        ("GET", f"{REST}/tasks/{tid}", None, {}),
        ("POST", f"{REST}/tasks/{tid}:cancel", None, {}),
        ("GET", f"{REST}/tasks/{tid}:subscribe", None, {}),
        ("GET", f"{REST}/tasks/{tid}/pushNotificationConfigs", None, {}),
        ("GET", f"{REST}/tasks/{tid}/pushNotificationConfigs/none", None, {}),
        ("GET", f"{REST}/acme/tasks", None, {}),
        ("GET", f"{REST}/acme/tasks/{tid}", None, {}),
        ("GET", f"{REST}/extendedAgentCard", None, {}),
        ("GET", f"{REST}/openapi.json", None, {}),
        ("POST", f"{REST}/v1/message:send", {"message": v03_rest_msg}, {}),
        ("GET", f"{REST}/v1/tasks/{tid}", None, {}),
        ("GET", f"{REST}/v1/tasks/{tid}:subscribe", None, {}),
        ("GET", f"{REST}/v1/card", None, {}),
        ("GET", f"/a2a/tasks/{tid}", None, {}),
        ("GET", "/a2a/tasks", None, {}),
        ("GET", f"/a2a/tasks/{tid}/pushNotificationConfig", None, {}),
        ("GET", "/.well-known/agent-card.json", None, {}),
        ("GET", "/.well-known/agent.json", None, {}),
        ("OPTIONS", "/.well-known/agent-card.json", None, {"Origin": "https://app.example"}),
        ("GET", "/healthz", None, {}),
        ("GET", "/readyz", None, {}),
    ]


def shape(resp: httpx.Response) -> tuple[int, str, Any]:
    """What must not depend on the slash: status, media type, and the JSON body's top-level keys."""
    ctype = resp.headers.get("content-type", "").split(";")[0]
    keys: Any = None
    if ctype.endswith("json") and resp.content:
        body = resp.json()
        keys = sorted(body) if isinstance(body, dict) else type(body).__name__
    return resp.status_code, ctype, keys


async def test_one_trailing_slash_is_the_same_route(client):
    tid = (await completed_task(client))["id"]
    for method, path, body, headers in routes(tid):
        plain = await client.request(method, path, json=body, headers=headers)
        slashed = await client.request(method, path + "/", json=body, headers=headers)
        where = f"{method} {path}/"
        assert not 300 <= slashed.status_code < 400, f"{where} redirects: {slashed.headers}"
        assert slashed.status_code != 404 or plain.status_code == 404, f"{where}: {slashed.text}"
        assert shape(slashed) == shape(plain), f"{where}: {slashed.text[:300]} vs {plain.text[:300]}"


async def test_two_slashes_are_not_a_route_and_not_a_redirect(client):
    resp = await client.post("/a2a/jsonrpc//", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get"})
    assert resp.status_code == 404


async def test_slashed_paths_keep_their_guard(auth_server):
    """The slash goes before authentication: the card and health stay public, the API does not, and a
    refusal keeps the shape of the route it aimed at."""
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=WAIT_S) as anon:
        for path in ("/.well-known/agent-card.json/", "/healthz/"):
            assert (await anon.get(path)).status_code == 200
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
        resp = await anon.post("/a2a/jsonrpc/", json=body)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == -32090
        resp = await anon.get(f"{REST}/tasks/x/")
        assert resp.status_code == 401 and resp.json()["error"]["status"] == "UNAUTHENTICATED"
        assert resp.headers["content-type"] == "application/json"
        resp = await anon.get(f"{REST}/tasks/x/", headers={"Accept": "application/a2a+json"})
        assert resp.status_code == 401 and resp.headers["content-type"] == "application/a2a+json"
        resp = await anon.post("/a2a/jsonrpc/", json=body, headers=key_of("alice"))
        assert resp.json()["error"]["code"] == -32001


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_official_client_on_interface_urls_with_a_trailing_slash(server, version):
    """a2a-sdk posts to the interface URL as written; with a `/` appended it must still get answers."""
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        card = await A2ACardResolver(http, server.base_url).get_agent_card()
        chosen = [
            i
            for i in card.supported_interfaces
            if i.protocol_binding == "JSONRPC" and i.protocol_version.startswith(version)
        ]
        for i in chosen:
            i.url += "/"
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(chosen)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        try:
            msg = new_text_message("say:slash", role=Role.ROLE_USER)
            request = SendMessageRequest(
                message=msg, configuration=SendMessageConfiguration(return_immediately=False)
            )
            events = [e async for e in client.send_message(request)]
        finally:
            await client.close()
    assert events[0].task.status.state == TaskState.TASK_STATE_COMPLETED


# ---- 3. ProtoJSON field names ------------------------------------------------------------------------


SNAKE_FIELDS = ("message_id", "context_id", "task_id", "history_length", "media_type", "page_size")


def assert_camel_output(payload: Any) -> None:
    """No proto (snake_case) field name in what the server wrote, outside free-form metadata and data."""

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for key, value in item.items():
                assert key not in SNAKE_FIELDS, f"{key} in {payload}"
                if key not in ("metadata", "data"):
                    walk(value)
        elif isinstance(item, list):
            for element in item:
                walk(element)

    walk(payload)


async def test_jsonrpc_accepts_proto_field_names_at_every_level(client):
    mid = str(uuid.uuid4())
    params = {
        "message": {
            "message_id": mid,
            "role": "ROLE_USER",
            "parts": [
                {"text": "say:snake", "media_type": "text/plain", "metadata": {"part_key": 1}},
                {"data": {"snake_key": {"inner_key": 1}}},
            ],
            "reference_task_ids": [],
            "metadata": {"user_key": {"deep_key": 1}},
        },
        "configuration": {"history_length": 1, "return_immediately": False, "accepted_output_modes": []},
    }
    sent = (await rpc_result(client, "SendMessage", params))["task"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED", "return_immediately=false: it waited"
    assert len(sent["history"]) == 1, "history_length was read"
    assert_camel_output(sent)
    tid, ctx = sent["id"], sent["contextId"]

    assert "history" not in await rpc_result(client, "GetTask", {"id": tid, "history_length": 0})
    got = await rpc_result(client, "GetTask", {"id": tid, "history_length": 5})
    (first,) = [m for m in got["history"] if m["role"] == "ROLE_USER"]
    assert first["messageId"] == mid
    assert first["parts"][0] == {"text": "say:snake", "mediaType": "text/plain", "metadata": {"part_key": 1}}
    assert first["parts"][1] == {"data": {"snake_key": {"inner_key": 1}}}, "data keeps its keys"
    assert first["metadata"] == {"user_key": {"deep_key": 1}}, "metadata keeps its keys"
    assert_camel_output(got)

    # A follow-up names its task and context by proto names; it continues that task.
    waiting = (await rpc_result(client, "SendMessage", {"message": v10_message("ask:Go?", contextId=ctx)}))[
        "task"
    ]
    answer = {"message_id": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "yes"}]}
    answer |= {"task_id": waiting["id"], "context_id": ctx}
    done = (await rpc_result(client, "SendMessage", {"message": answer}))["task"]
    assert done["id"] == waiting["id"] and done["status"]["state"] == "TASK_STATE_COMPLETED"

    page = await rpc_result(
        client,
        "ListTasks",
        {"context_id": ctx, "page_size": 1, "include_artifacts": True, "history_length": 0},
    )
    assert page["pageSize"] == 1 and page["totalSize"] == 2 and page["nextPageToken"]
    assert page["tasks"][0]["id"] == done["id"] and "artifacts" in page["tasks"][0]
    assert "history" not in page["tasks"][0]
    assert_camel_output(page)

    configs = await rpc_result(client, "ListTaskPushNotificationConfigs", {"task_id": tid, "page_size": 1})
    assert configs == {"configs": [], "nextPageToken": ""}
    missing = await rpc(client, "GetTaskPushNotificationConfig", {"task_id": tid, "id": "none"})
    assert missing["error"]["code"] == -32001


async def test_v03_jsonrpc_accepts_proto_field_names_too(client):
    """v0.3 `message/send` takes the proto's snake_case names as a2a-python's v0.3 models do; what the
    server writes stays camelCase, and an error names the JSON field."""

    async def v03(method: str, params: Any) -> dict[str, Any]:
        resp = await client.post(
            "/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    mid = str(uuid.uuid4())
    message = {
        "kind": "message",
        "message_id": mid,
        "role": "user",
        "parts": [
            {"kind": "text", "text": "say:snake"},
            {"kind": "file", "file": {"bytes": "aGk=", "mime_type": "text/plain", "name": "a.txt"}},
        ],
        "reference_task_ids": [],
    }
    sent = await v03(
        "message/send", {"message": message, "configuration": {"history_length": 1, "blocking": True}}
    )
    task = sent["result"]
    assert task["status"]["state"] == "completed"
    assert len(task["history"]) == 1, "history_length was read"
    assert task["history"][0]["messageId"] == mid
    assert task["history"][0]["parts"][1]["file"]["mimeType"] == "text/plain"
    assert "message_id" not in str(task) and "mime_type" not in str(task)

    asked = (
        await v03(
            "message/send",
            {
                "message": {
                    **message,
                    "message_id": str(uuid.uuid4()),
                    "parts": [{"kind": "text", "text": "ask:Go?"}],
                }
            },
        )
    )["result"]
    assert asked["status"]["state"] == "input-required"
    answer = {**message, "message_id": str(uuid.uuid4()), "parts": [{"kind": "text", "text": "yes"}]}
    answer |= {"task_id": asked["id"], "context_id": asked["contextId"]}
    done = (await v03("message/send", {"message": answer}))["result"]
    assert done["id"] == asked["id"] and done["status"]["state"] == "completed"

    missing = await v03("message/send", {"message": {"kind": "message", "role": "user", "message_id": ""}})
    assert missing["error"]["code"] == -32602
    assert "messageId" in missing["error"]["message"], missing

    both = await v03("message/send", {"message": {**message, "messageId": "another"}})
    assert both["error"]["code"] == -32602
    assert "messageId and message_id differ" in both["error"]["message"], both


async def test_inline_push_config_by_proto_name_is_read(client):
    """`task_push_notification_config` is not ignored: a refused webhook URL fails the send."""
    params = {
        "message": v10_message("say:x"),
        "configuration": {"task_push_notification_config": {"url": "https://127.0.0.1/hook"}},
    }
    data = await rpc(client, "SendMessage", params)
    assert data["error"]["code"] == -32602, data


@pytest.mark.parametrize(
    ("method", "params", "names"),
    [
        ("GetTask", {"id": "t", "historyLength": 0, "history_length": 2}, "history_length"),
        ("ListTasks", {"pageSize": 5, "page_size": 6}, "page_size"),
        (
            "SendMessage",
            {"message": {**v10_message("say:x"), "message_id": "other"}},
            "message_id",
        ),
        (
            "SendMessage",
            {"message": v10_message("say:x"), "configuration": {"historyLength": 1, "history_length": 2}},
            "history_length",
        ),
        (
            "SendMessage",
            {
                "message": {
                    **v10_message("say:x", parts=[{"text": "a", "mediaType": "x/y", "media_type": "y/z"}])
                }
            },
            "media_type",
        ),
        ("ListTaskPushNotificationConfigs", {"taskId": "a", "task_id": "b"}, "task_id"),
    ],
)
async def test_both_spellings_with_different_values_is_invalid_params(client, method, params, names):
    before = (await rpc_result(client, "ListTasks", {}))["totalSize"]
    data = await rpc(client, method, params)
    assert data["error"]["code"] == -32602, data
    assert names in data["error"]["message"]
    assert data["error"]["data"][0]["reason"] == "INVALID_PARAMS"
    assert (await rpc_result(client, "ListTasks", {}))["totalSize"] == before, "nothing was created"


async def test_both_spellings_with_the_same_value_are_one_field(client):
    tid = (await completed_task(client))["id"]
    got = await rpc_result(client, "GetTask", {"id": tid, "historyLength": 0, "history_length": 0})
    assert "history" not in got


async def test_rest_accepts_proto_field_names_in_body_and_query(client):
    body = {
        "message": {"message_id": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "ask:Go?"}]},
        "configuration": {"history_length": 0, "return_immediately": False},
    }
    resp = await client.post(f"{REST}/message:send", json=body)
    assert resp.status_code == 200, resp.text
    task = resp.json()["task"]
    assert "history" not in task and task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    tid, ctx = task["id"], task["contextId"]
    answer = {"message": {"message_id": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "y"}]}}
    answer["message"] |= {"task_id": tid}
    done = (await client.post(f"{REST}/message:send", json=answer)).json()["task"]
    assert done["id"] == tid and done["status"]["state"] == "TASK_STATE_COMPLETED"

    got = await client.get(f"{REST}/tasks/{tid}", params={"history_length": 0})
    assert got.status_code == 200 and "history" not in got.json()
    got = await client.get(f"{REST}/tasks/{tid}", params={"history_length": 1})
    assert len(got.json()["history"]) == 1
    page = await client.get(
        f"{REST}/tasks", params={"context_id": ctx, "page_size": 1, "include_artifacts": "true"}
    )
    assert page.status_code == 200, page.text
    assert page.json()["pageSize"] == 1 and [t["id"] for t in page.json()["tasks"]] == [tid]
    assert "artifacts" in page.json()["tasks"][0]
    configs = await client.get(f"{REST}/tasks/{tid}/pushNotificationConfigs", params={"page_size": 1})
    assert configs.json() == {"configs": [], "nextPageToken": ""}
    alias = await client.get("/a2a/tasks", params={"context_id": ctx, "page_size": 1})
    assert [t["id"] for t in alias.json()["tasks"]] == [tid]

    resp = await client.get(f"{REST}/tasks/{tid}", params={"historyLength": 0, "history_length": 1})
    assert resp.status_code == 400 and resp.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    assert "history_length" in resp.json()["error"]["message"]
    # The task of the path wins over one in the body, under either name.
    resp = await client.post(
        f"{REST}/tasks/{tid}/pushNotificationConfigs", json={"task_id": "other", "url": "https://127.0.0.1/x"}
    )
    assert resp.status_code == 400 and "URL refused" in resp.json()["error"]["message"], resp.text


# ---- 5. the card by version ---------------------------------------------------------------------------


def strict_v10(card: dict[str, Any]) -> AgentCard:
    """The card parsed as the v1.0 proto AgentCard with no unknown field allowed (a v1.0 schema check)."""
    return ParseDict(card, AgentCard())


async def test_card_variants_by_a2a_version(client):
    hybrid = await client.get("/.well-known/agent-card.json")
    v10 = await client.get("/.well-known/agent-card.json", headers=V10)
    v03 = await client.get("/.well-known/agent-card.json", headers={"A2A-Version": "0.3"})
    for resp in (hybrid, v10, v03):
        assert resp.status_code == 200 and resp.headers["vary"] == "A2A-Version"
    assert v03.content == hybrid.content and v03.headers["etag"] == hybrid.headers["etag"]
    assert v10.headers["etag"] != hybrid.headers["etag"]

    with pytest.raises(ParseError):
        strict_v10(hybrid.json())
    card = strict_v10(v10.json())
    assert [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "1.0"),
        ("HTTP+JSON", "0.3"),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    for field in ("url", "protocolVersion", "preferredTransport", "additionalInterfaces"):
        assert field in hybrid.json() and field not in v10.json()
    assert "stateTransitionHistory" not in v10.json()["capabilities"]
    query = await client.get("/.well-known/agent-card.json", params={"A2A-Version": "1.0"})
    assert query.content == v10.content

    # Each variant answers If-None-Match with its own ETag only.
    etag10, etag_h = v10.headers["etag"], hybrid.headers["etag"]
    same = await client.get("/.well-known/agent.json", headers={**V10, "If-None-Match": etag10})
    assert same.status_code == 304 and same.headers["etag"] == etag10
    other = await client.get("/.well-known/agent.json", headers={**V10, "If-None-Match": etag_h})
    assert other.status_code == 200 and other.content == v10.content
    assert (await client.get("/.well-known/agent.json", headers={"If-None-Match": etag10})).status_code == 200


async def test_extended_card_variants(auth_server):
    bob = key_of("bob")
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=WAIT_S) as http:
        public = strict_v10((await http.get("/.well-known/agent-card.json", headers=V10)).json())
        assert public.security_schemes["apiKey"].api_key_security_scheme.name == "X-API-Key"
        assert public.capabilities.extended_agent_card

        rest = await http.get(f"{REST}/extendedAgentCard", headers={**bob, **V10})
        assert rest.status_code == 200 and rest.headers["vary"] == "A2A-Version"
        assert "admin" in {s.id for s in strict_v10(rest.json()).skills}
        again = await http.get(
            f"{REST}/extendedAgentCard", headers={**bob, **V10, "If-None-Match": rest.headers["etag"]}
        )
        assert again.status_code == 304
        hybrid = await http.get(f"{REST}/extendedAgentCard", headers=bob)
        assert hybrid.headers["etag"] != rest.headers["etag"]
        assert hybrid.json()["supportsAuthenticatedExtendedCard"] is True

        body = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}
        got = (await http.post("/a2a/jsonrpc", json=body, headers={**bob, **V10})).json()["result"]
        assert "admin" in {s.id for s in strict_v10(got).skills}
        body = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"}
        got = (await http.post("/a2a/jsonrpc", json=body, headers=bob)).json()["result"]
        assert got["supportsAuthenticatedExtendedCard"] is True and "url" in got, "v0.3 gets the hybrid"


@pytest.fixture(scope="module")
async def v10_card_server(tmp_path_factory: Any):
    srv = await make_server("sqlite", tmp_path_factory.mktemp("card-compat"), CARD_COMPAT="1.0")
    yield srv
    srv.stop()


async def test_card_compat_1_0_makes_the_v10_card_the_default(v10_card_server):
    async with httpx.AsyncClient(base_url=v10_card_server.base_url, timeout=WAIT_S) as http:
        default = await http.get("/.well-known/agent-card.json")
        strict_v10(default.json())
        assert default.headers["vary"] == "A2A-Version"
        explicit = await http.get("/.well-known/agent-card.json", headers=V10)
        assert explicit.content == default.content
        v03 = await http.get("/.well-known/agent-card.json", headers={"A2A-Version": "0.3"})
        assert v03.json()["protocolVersion"] == "0.3.0"

        # The official client builds itself from the v1.0-only card and works.
        client = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(
            v10_card_server.base_url
        )
        try:
            msg = new_text_message("say:compat", role=Role.ROLE_USER)
            events = [e async for e in client.send_message(SendMessageRequest(message=msg))]
        finally:
            await client.close()
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    versions = {i["protocolVersion"] for i in default.json()["supportedInterfaces"]}
    assert versions == {"1.0", "0.3"}, "the server still serves v0.3, and says so"


@pytest.mark.parametrize(
    "args", [("--stock",), ("--transport", "HTTP+JSON", "--protocol", "1.0")], ids=["stock", "v10-rest"]
)
async def test_card_compat_1_0_serves_the_official_js_client(v10_card_server, request, args):
    node_bin = request.getfixturevalue("node")
    run = await run_interop(node_bin, v10_card_server.base_url, JsVariant(args, None, "1.0"))
    assert run.step("send")["task"]["state"] == "TASK_STATE_COMPLETED"
    assert run.step("stream")["folded"]["state"] == "TASK_STATE_COMPLETED"


# ---- 7. one `working` ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
async def capabilities_server(request: pytest.FixtureRequest, tmp_path_factory: Any):
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"working-{request.param}"),
        AGENT_ADAPTER="tests.support.agents.capabilities:CapabilitiesAgent",
    )
    yield srv
    srv.stop()


async def test_an_agent_that_starts_working_shows_one_working(capabilities_server):
    """The official client's stream: the agent's own `working` (with its note) is the only one."""
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
        client = await factory.create_from_url(capabilities_server.base_url)
        try:
            msg = new_text_message("working:reading the code", role=Role.ROLE_USER)
            events = [e async for e in client.send_message(SendMessageRequest(message=msg))]
        finally:
            await client.close()
    working = [
        e.status_update.status
        for e in events
        if e.HasField("status_update") and e.status_update.status.state == TaskState.TASK_STATE_WORKING
    ]
    assert len(working) == 1, events
    assert working[0].message.parts[0].text == "reading the code"
