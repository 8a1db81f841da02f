"""Interop: the official Python A2A client (`a2a-sdk` 1.3.0) drives the real server over HTTP+JSON (REST).

The client is made from our agent card with only the HTTP+JSON binding allowed, so it picks the card's
`HTTP+JSON` interface: in protocol 1.0 its `RestTransport` (ProtoJSON of `lf.a2a.v1` at `/a2a/rest/...`), in
protocol 0.3 (the card filtered to its v0.3 interfaces, as a v0.3-only client sees it) its
`CompatRestTransport` (ProtoJSON of the v0.3 proto at `/a2a/rest/v1/...`, snake_case field names). Every
call goes through the SDK's own request building, response parsing and error mapping.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.rest import RestTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
    UnsupportedOperationError,
)
from a2a.utils.constants import TransportProtocol

from tests.interop.test_interop_sdk import (
    ORDER,
    RESPONSE,
    WAIT_S,
    artifact_named,
    collect,
    fold,
    kind,
    only_v03,
    open_stream,
    send_for_task,
    state_of,
    text_of,
    usage_round_trip,
    user_message,
)
from tests.support.server import ServerProcess

S = TaskState
_TASK_PATH = re.compile(r"/tasks/[^/:]+")


class Wire:
    """What the SDK put on the wire: (HTTP method, path under the interface URL, A2A-Version) per request.

    Task ids in paths read `{id}`; `seen` drops the v0.3 `/v1` and checks the version header against the
    protocol under test, so one assertion reads the same for both protocols.
    """

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.calls: list[tuple[str, str, str | None]] = []

    async def record(self, request: httpx.Request) -> None:
        path = request.url.path
        if path.startswith("/a2a/rest"):
            path = _TASK_PATH.sub("/tasks/{id}", path.removeprefix("/a2a/rest"))
            self.calls.append((request.method, path, request.headers.get("A2A-Version")))

    @property
    def seen(self) -> list[tuple[str, str]]:
        out = []
        for method, path, version in self.calls:
            assert version == self.protocol, (method, path, version)
            if self.protocol == "0.3":
                assert path.startswith("/v1/"), path
                path = path.removeprefix("/v1")
            out.append((method, path))
        return out


@pytest.fixture(params=["1.0", "0.3"])
def protocol(request: pytest.FixtureRequest) -> str:
    """The protocol version the SDK client speaks: v1.0 (its preference) or v0.3 (compat mode)."""
    return request.param


@pytest.fixture
def wire(protocol: str) -> Wire:
    return Wire(protocol)


@asynccontextmanager
async def rest_client(server: ServerProcess, wire: Wire, *, streaming: bool) -> AsyncIterator[Client]:
    """An SDK client made from our agent card that may only use HTTP+JSON."""
    async with httpx.AsyncClient(timeout=WAIT_S, event_hooks={"request": [wire.record]}) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=streaming,
            supported_protocol_bindings=[TransportProtocol.HTTP_JSON],
        )
        factory = ClientFactory(config)
        if wire.protocol == "1.0":
            client = await factory.create_from_url(server.base_url)
        else:
            card = await A2ACardResolver(http, server.base_url).get_agent_card()
            client = factory.create(only_v03(card))
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def sdk(server: ServerProcess, wire: Wire) -> AsyncIterator[Client]:
    """Non-streaming client: `send_message` is `POST message:send`, one Task back."""
    async with rest_client(server, wire, streaming=False) as client:
        yield client


@pytest.fixture
async def sdk_stream(server: ServerProcess, wire: Wire) -> AsyncIterator[Client]:
    """Streaming client: `send_message` is `POST message:stream`, events until the server ends the stream."""
    async with rest_client(server, wire, streaming=True) as client:
        yield client


# ---- tests --------------------------------------------------------------------------------------


async def test_sdk_picks_the_rest_transport_of_its_protocol(sdk: Client, wire: Wire, server) -> None:
    transport = sdk._transport  # type: ignore[attr-defined]
    expected = RestTransport if wire.protocol == "1.0" else CompatRestTransport
    assert type(transport) is expected
    assert transport.url == f"{server.base_url}/a2a/rest"
    interfaces = {(i.protocol_binding, i.protocol_version) for i in transport.agent_card.supported_interfaces}
    assert ("HTTP+JSON", wire.protocol) in interfaces

    await send_for_task(sdk, user_message("say:hi"))
    prefix = "" if wire.protocol == "1.0" else "/v1"
    assert wire.calls == [("POST", f"{prefix}/message:send", wire.protocol)]


async def test_send_blocking_completes_with_echoed_text(sdk: Client, wire: Wire) -> None:
    text = "hello over rest"
    task = await send_for_task(sdk, user_message(text))

    assert task.id and task.context_id
    assert task.status.state == S.TASK_STATE_COMPLETED
    assert task.status.timestamp.seconds > 0
    assert text_of(artifact_named(task, RESPONSE)) == text
    assert [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER] == [text]
    assert wire.seen == [("POST", "/message:send")]


async def test_send_non_blocking_returns_at_once(sdk: Client, wire: Wire) -> None:
    task = await send_for_task(sdk, user_message("sleep:300"), return_immediately=True)
    assert task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    canceled = await sdk.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == S.TASK_STATE_CANCELED
    got = await sdk.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == S.TASK_STATE_CANCELED
    assert wire.seen == [("POST", "/message:send"), ("POST", "/tasks/{id}:cancel"), ("GET", "/tasks/{id}")]


async def test_stream_delivers_task_then_updates_until_completed(sdk_stream: Client, wire: Wire) -> None:
    async with open_stream(sdk_stream, user_message("chunks:5")) as stream:
        events = await stream.rest()

    assert wire.seen == [("POST", "/message:stream")]
    assert kind(events[0]) == "task", "the stream opens with the task"
    assert all(kind(e) in ("status_update", "artifact_update") for e in events[1:])
    task_id = events[0].task.id
    assert all(getattr(e, kind(e)).task_id == task_id for e in events[1:])

    states = [s for s in map(state_of, events) if s is not None]
    assert states[-1] == S.TASK_STATE_COMPLETED
    assert kind(events[-1]) == "status_update", "the completed status is the last event"
    assert [ORDER.index(s) for s in states] == sorted(ORDER.index(s) for s in states), states

    state, texts = fold(events)
    assert state == S.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "".join(f"chunk-{i} " for i in range(5))


async def test_input_required_then_answer_and_get_with_history(sdk: Client, wire: Wire) -> None:
    asked = await send_for_task(sdk, user_message("ask:Proceed?"))
    assert asked.status.state == S.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.role == Role.ROLE_AGENT
    assert get_message_text(asked.status.message) == "Proceed?"

    done = await send_for_task(sdk, user_message("go ahead", task_id=asked.id))
    assert (done.id, done.context_id) == (asked.id, asked.context_id)
    assert done.status.state == S.TASK_STATE_COMPLETED
    assert text_of(artifact_named(done, RESPONSE)) == "answer:go ahead"

    got = await sdk.get_task(GetTaskRequest(id=asked.id))
    assert [(m.role, get_message_text(m)) for m in got.history] == [
        (Role.ROLE_USER, "ask:Proceed?"),
        (Role.ROLE_AGENT, "Proceed?"),
        (Role.ROLE_USER, "go ahead"),
    ]
    assert got.history[0].task_id == asked.id
    last = await sdk.get_task(GetTaskRequest(id=asked.id, history_length=1))
    assert [get_message_text(m) for m in last.history] == ["go ahead"]
    assert wire.seen == [("POST", "/message:send")] * 2 + [("GET", "/tasks/{id}")] * 2


async def test_list_tasks(sdk: Client, wire: Wire) -> None:
    first = await send_for_task(sdk, user_message("say:one"))
    second = await send_for_task(sdk, user_message("say:two", context_id=first.context_id))
    request = ListTasksRequest(context_id=first.context_id, page_size=1, include_artifacts=True)
    if wire.protocol == "0.3":
        with pytest.raises(NotImplementedError):  # v0.3 REST has no ListTasks: the SDK does not ask
            await sdk.list_tasks(request)
        assert wire.seen == [("POST", "/message:send")] * 2
        return

    page = await sdk.list_tasks(request)
    assert [t.id for t in page.tasks] == [second.id], "newest status first"
    assert page.page_size == 1 and page.total_size == 2 and page.next_page_token
    assert text_of(artifact_named(page.tasks[0], RESPONSE)) == "two"
    rest = await sdk.list_tasks(
        ListTasksRequest(context_id=first.context_id, page_size=1, page_token=page.next_page_token)
    )
    assert [t.id for t in rest.tasks] == [first.id]
    assert rest.next_page_token == ""
    assert not rest.tasks[0].artifacts, "artifacts only when asked for"

    done = await sdk.list_tasks(
        ListTasksRequest(context_id=first.context_id, status=S.TASK_STATE_COMPLETED, history_length=0)
    )
    assert {t.id for t in done.tasks} == {first.id, second.id}
    assert all(not t.history for t in done.tasks)
    none = await sdk.list_tasks(ListTasksRequest(context_id=first.context_id, status=S.TASK_STATE_WORKING))
    assert (list(none.tasks), none.total_size) == ([], 0)
    assert wire.seen == [("POST", "/message:send")] * 2 + [("GET", "/tasks")] * 4


async def test_cancel_a_running_task(sdk_stream: Client, sdk: Client, wire: Wire) -> None:
    async with open_stream(sdk_stream, user_message("sleep:300")) as stream:
        first = await stream.next()
        task_id = first.task.id
        if first.task.status.state != S.TASK_STATE_WORKING:
            await stream.until(lambda e: state_of(e) == S.TASK_STATE_WORKING)

        canceled = await sdk.cancel_task(CancelTaskRequest(id=task_id))
        assert canceled.id == task_id
        assert canceled.status.state == S.TASK_STATE_CANCELED
        after = await stream.rest()
    assert after and state_of(after[-1]) == S.TASK_STATE_CANCELED

    with pytest.raises(TaskNotCancelableError):
        await sdk.cancel_task(CancelTaskRequest(id=task_id))
    got = await sdk.get_task(GetTaskRequest(id=task_id))
    assert got.status.state == S.TASK_STATE_CANCELED
    assert wire.seen == [
        ("POST", "/message:stream"),
        ("POST", "/tasks/{id}:cancel"),
        ("POST", "/tasks/{id}:cancel"),
        ("GET", "/tasks/{id}"),
    ]


async def test_subscribe_follows_a_waiting_task_to_the_end(
    sdk_stream: Client, sdk: Client, wire: Wire
) -> None:
    asked = await send_for_task(sdk, user_message("ask:Subscribe?;chunks:2"))
    assert asked.status.state == S.TASK_STATE_INPUT_REQUIRED

    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=asked.id))
    try:
        async with asyncio.timeout(WAIT_S):
            first = await anext(events)
        assert kind(first) == "task", "the current task comes first"
        assert first.task.id == asked.id
        assert first.task.status.state == S.TASK_STATE_INPUT_REQUIRED

        await send_for_task(sdk, user_message("yes", task_id=asked.id), return_immediately=True)
        after = await collect(events)
    finally:
        await events.aclose()

    assert kind(after[-1]) == "status_update" and state_of(after[-1]) == S.TASK_STATE_COMPLETED
    state, texts = fold([first, *after])
    assert state == S.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "answer:yeschunk-0 chunk-1 "
    # The SDK subscribes with POST (the 0.3 client would fall back to GET on a 405).
    assert wire.seen == [
        ("POST", "/message:send"),
        ("POST", "/tasks/{id}:subscribe"),
        ("POST", "/message:send"),
    ]


async def test_subscribe_to_a_finished_task(sdk_stream: Client, sdk: Client, wire: Wire) -> None:
    task = await send_for_task(sdk, user_message("say:done"))
    assert task.status.state == S.TASK_STATE_COMPLETED
    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=task.id))
    if wire.protocol == "1.0":
        with pytest.raises(UnsupportedOperationError):  # nothing left to subscribe to (§3.1.6)
            await collect(events)
    else:
        # The v0.3 proto: "If the task is complete the stream will return the completed task and close".
        got = await collect(events)
        assert [kind(e) for e in got] == ["task"]
        assert got[0].task.id == task.id and state_of(got[0]) == S.TASK_STATE_COMPLETED
    assert wire.seen == [("POST", "/message:send"), ("POST", "/tasks/{id}:subscribe")]


async def test_unknown_task_is_task_not_found(sdk: Client, sdk_stream: Client, wire: Wire) -> None:
    with pytest.raises(TaskNotFoundError):
        await sdk.get_task(GetTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await sdk.cancel_task(CancelTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await collect(sdk_stream.subscribe(SubscribeToTaskRequest(id="no-such-task")))
    assert [m for m, _ in wire.seen] == ["GET", "POST", "POST"]


async def test_push_configs_round_trip(sdk: Client, wire: Wire, server: ServerProcess) -> None:
    """The official client creates, reads, lists and deletes a webhook over either REST binding.

    The URL is a public address literal (the SSRF guard refuses private ones); the config is deleted at
    the end so no delivery to it is left waiting.
    """
    task = await send_for_task(sdk, user_message("say:x"))
    url = "https://93.184.215.14/hook"
    created = await sdk.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="cfg-1", url=url, token="secret")
    )
    assert created.id == "cfg-1" and created.url == url and created.token != "secret"
    got = await sdk.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
    )
    assert got.url == url and got.token != "secret"
    if wire.protocol == "0.3":
        # The 0.3 compat transport has no list or delete; delete over plain HTTP.
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            resp = await http.delete(f"/a2a/rest/v1/tasks/{task.id}/pushNotificationConfigs/cfg-1")
            assert resp.status_code == 200
        assert wire.seen[1:] == [
            ("POST", "/tasks/{id}/pushNotificationConfigs"),
            ("GET", "/tasks/{id}/pushNotificationConfigs/cfg-1"),
        ]
        return
    listed = await sdk.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in listed.configs] == ["cfg-1"]
    await sdk.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
    )
    listed = await sdk.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert list(listed.configs) == []
    with pytest.raises(TaskNotFoundError):
        await sdk.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
        )
    assert wire.seen[1:] == [
        ("POST", "/tasks/{id}/pushNotificationConfigs"),
        ("GET", "/tasks/{id}/pushNotificationConfigs/cfg-1"),
        ("GET", "/tasks/{id}/pushNotificationConfigs"),
        ("DELETE", "/tasks/{id}/pushNotificationConfigs/cfg-1"),
        ("GET", "/tasks/{id}/pushNotificationConfigs"),
        ("GET", "/tasks/{id}/pushNotificationConfigs/cfg-1"),
    ]


async def test_tenant_form(server: ServerProcess, wire: Wire) -> None:
    """A tenant in the request puts the v1.0 routes under `/{tenant}/...` (the v0.3 binding has none)."""
    if wire.protocol == "0.3":
        pytest.skip("the v0.3 REST binding has no tenant")
    async with rest_client(server, wire, streaming=False) as sdk:
        msg = user_message("say:tenant")
        events = [e async for e in sdk.send_message(SendMessageRequest(tenant="acme", message=msg))]
        task = events[0].task
        assert task.status.state == S.TASK_STATE_COMPLETED
        got = await sdk.get_task(GetTaskRequest(tenant="acme", id=task.id))
        assert got.id == task.id
    assert wire.seen == [("POST", "/acme/message:send"), ("GET", "/acme/tasks/{id}")]


async def test_usage_is_in_the_task_metadata(sdk: Client, sdk_stream: Client) -> None:
    await usage_round_trip(sdk, sdk_stream)
