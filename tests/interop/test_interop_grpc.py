"""Interop: the official Python A2A client (`a2a-sdk` 1.3.0) drives the real server over gRPC.

The server runs with a gRPC port and API keys (alice, bob) and an extended card. The client is made from
our agent card with only the GRPC binding allowed: in protocol 1.0 its `GrpcTransport`
(`lf.a2a.v1.A2AService`), in protocol 0.3 (the card filtered to its v0.3 interfaces) its
`CompatGrpcTransport` (`a2a.v1.A2AService`); both on the one port, the credential in the metadata (a
channel interceptor). Every call goes through the SDK's own request building, response parsing and error
mapping (1.0: the ErrorInfo reason; 0.3: the `<ErrorClassName>: ` message). Raw stubs check what the SDK
hides: the status codes, the `grpc-status-details-bin` trailer, undecodable bytes, a missing credential.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.grpc import GrpcTransport
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.compat.v0_3.grpc_transport import CompatGrpcTransport
from a2a.helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
    UnsupportedOperationError,
    a2a_pb2,
    a2a_pb2_grpc,
)
from a2a.utils.constants import TransportProtocol
from google.rpc import error_details_pb2, status_pb2

from tests.conftest import BACKENDS, make_server
from tests.e2e.test_metrics import delta, scrape
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
from tests.support.auth import KEYS, api_keys_env
from tests.support.server import ServerProcess, free_port

S = TaskState
ALICE = {"x-api-key": KEYS["alice"]}
MAX_BYTES = 256 * 1024
SKILLS = '[{"id": "admin", "name": "Admin", "description": "Only for signed-in callers", "tags": ["x"]}]'


@pytest.fixture(scope="session", params=BACKENDS)
async def grpc_server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server with gRPC on a free port, API keys and an extended card, running the scripted agent."""
    port = free_port()
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"grpc-{request.param}"),
        **api_keys_env(EXTENDED_CARD_SKILLS=SKILLS, GRPC_PORT=str(port), MAX_BODY_BYTES=str(MAX_BYTES)),
    )
    srv.grpc_port = port  # type: ignore[attr-defined]
    yield srv
    srv.stop()


class _Metadata:
    """Adds fixed metadata (the credential) to every call, as an SDK user's channel would."""

    def __init__(self, metadata: dict[str, str]) -> None:
        self.metadata = list(metadata.items())

    def details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return details._replace(metadata=[*(details.metadata or []), *self.metadata])  # type: ignore[attr-defined]


class _UnaryMetadata(_Metadata, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Callable, details: Any, request: Any) -> Any:
        return await continuation(self.details(details), request)


class _StreamMetadata(_Metadata, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Callable, details: Any, request: Any) -> Any:
        return await continuation(self.details(details), request)


def channel(url: str, metadata: dict[str, str] | None = None) -> grpc.aio.Channel:
    """A channel to `url`; `metadata` on every call (grpc.aio takes one interceptor per call kind)."""
    interceptors = [_UnaryMetadata(metadata), _StreamMetadata(metadata)] if metadata else None
    return grpc.aio.insecure_channel(url, interceptors=interceptors)


@pytest.fixture(params=["1.0", "0.3"])
def protocol(request: pytest.FixtureRequest) -> str:
    """The protocol version the SDK client speaks: v1.0 (its preference) or v0.3 (compat mode)."""
    return request.param


@asynccontextmanager
async def grpc_client(server: ServerProcess, protocol: str, *, streaming: bool) -> AsyncIterator[Client]:
    """An SDK client made from our agent card that may only use gRPC, signed in as alice."""
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=streaming,
            supported_protocol_bindings=[TransportProtocol.GRPC],
            grpc_channel_factory=lambda url: channel(url, ALICE),
        )
        card = await A2ACardResolver(http, server.base_url).get_agent_card()
        if protocol == "0.3":
            card = only_v03(card)
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def sdk(grpc_server: ServerProcess, protocol: str) -> AsyncIterator[Client]:
    """Non-streaming client: `send_message` is SendMessage, one Task back."""
    async with grpc_client(grpc_server, protocol, streaming=False) as client:
        yield client


@pytest.fixture
async def sdk_stream(grpc_server: ServerProcess, protocol: str) -> AsyncIterator[Client]:
    """Streaming client: `send_message` is SendStreamingMessage."""
    async with grpc_client(grpc_server, protocol, streaming=True) as client:
        yield client


def address(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.grpc_port}"  # type: ignore[attr-defined]


def error_info(err: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo in the call's `grpc-status-details-bin` trailer."""
    raw = dict(err.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    assert status.code == err.code().value[0] and status.message == err.details()
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info


# ---- the SDK ------------------------------------------------------------------------------------


async def test_sdk_picks_the_grpc_transport_of_its_protocol(sdk: Client, protocol: str, grpc_server) -> None:
    transport = sdk._transport  # type: ignore[attr-defined]
    assert type(transport) is (GrpcTransport if protocol == "1.0" else CompatGrpcTransport)
    interfaces = {
        (i.url, i.protocol_binding, i.protocol_version) for i in transport.agent_card.supported_interfaces
    }
    # The card was fetched through 127.0.0.1 with no PUBLIC_URL: its gRPC host follows (`Card.at`).
    assert (f"127.0.0.1:{grpc_server.grpc_port}", "GRPC", protocol) in interfaces

    task = await send_for_task(sdk, user_message("hello over grpc"))
    assert task.status.state == S.TASK_STATE_COMPLETED
    assert text_of(artifact_named(task, RESPONSE)) == "hello over grpc"


async def test_send_non_blocking_then_cancel_and_get(sdk: Client) -> None:
    task = await send_for_task(sdk, user_message("sleep:300"), return_immediately=True)
    assert task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    canceled = await sdk.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.id == task.id and canceled.status.state == S.TASK_STATE_CANCELED
    got = await sdk.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == S.TASK_STATE_CANCELED


async def test_stream_delivers_task_then_updates_until_completed(sdk_stream: Client) -> None:
    async with open_stream(sdk_stream, user_message("chunks:5")) as stream:
        events = await stream.rest()

    assert kind(events[0]) == "task", "the stream opens with the task"
    assert all(kind(e) in ("status_update", "artifact_update") for e in events[1:])
    assert all(getattr(e, kind(e)).task_id == events[0].task.id for e in events[1:])
    states = [s for s in map(state_of, events) if s is not None]
    assert [ORDER.index(s) for s in states] == sorted(ORDER.index(s) for s in states), states
    state, texts = fold(events)
    assert state == S.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "".join(f"chunk-{i} " for i in range(5))


async def test_a_streamed_question_ends_the_stream_and_the_streamed_answer_ends_the_task(
    sdk_stream: Client,
) -> None:
    """A gRPC server stream is a turn as on the HTTP bindings: it ends at input-required (the SDK's
    iteration simply stops), and the streamed answer follows the same task to its end."""
    async with open_stream(sdk_stream, user_message("ask:Colour?")) as stream:
        asked = await stream.rest()
    assert state_of(asked[-1]) == S.TASK_STATE_INPUT_REQUIRED, asked
    assert get_message_text(asked[-1].status_update.status.message) == "Colour?"
    task = asked[0].task
    answer = user_message("blue", task_id=task.id, context_id=task.context_id)
    async with open_stream(sdk_stream, answer) as stream:
        answered = await stream.rest()
    assert kind(answered[0]) == "task" and answered[0].task.id == task.id
    state, texts = fold(answered)
    assert state == S.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "answer:blue"


async def test_input_required_then_answer_and_get_with_history(sdk: Client) -> None:
    asked = await send_for_task(sdk, user_message("ask:Proceed?"))
    assert asked.status.state == S.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(asked.status.message) == "Proceed?"

    done = await send_for_task(sdk, user_message("go ahead", task_id=asked.id))
    assert (done.id, done.context_id) == (asked.id, asked.context_id)
    assert text_of(artifact_named(done, RESPONSE)) == "answer:go ahead"

    got = await sdk.get_task(GetTaskRequest(id=asked.id))
    assert [(m.role, get_message_text(m)) for m in got.history] == [
        (Role.ROLE_USER, "ask:Proceed?"),
        (Role.ROLE_AGENT, "Proceed?"),
        (Role.ROLE_USER, "go ahead"),
    ]
    last = await sdk.get_task(GetTaskRequest(id=asked.id, history_length=1))
    assert [get_message_text(m) for m in last.history] == ["go ahead"]


async def test_list_tasks(sdk: Client, protocol: str) -> None:
    first = await send_for_task(sdk, user_message("say:one"))
    second = await send_for_task(sdk, user_message("say:two", context_id=first.context_id))
    request = ListTasksRequest(context_id=first.context_id, page_size=1, include_artifacts=True)
    if protocol == "0.3":
        with pytest.raises(NotImplementedError):  # the v0.3 proto has no ListTasks: the SDK does not ask
            await sdk.list_tasks(request)
        return
    page = await sdk.list_tasks(request)
    assert [t.id for t in page.tasks] == [second.id], "newest status first"
    assert page.page_size == 1 and page.total_size == 2 and page.next_page_token
    assert text_of(artifact_named(page.tasks[0], RESPONSE)) == "two"
    rest = await sdk.list_tasks(
        ListTasksRequest(context_id=first.context_id, page_size=1, page_token=page.next_page_token)
    )
    assert [t.id for t in rest.tasks] == [first.id] and rest.next_page_token == ""
    none = await sdk.list_tasks(ListTasksRequest(context_id=first.context_id, status=S.TASK_STATE_WORKING))
    assert (list(none.tasks), none.total_size) == ([], 0)


async def test_subscribe_follows_a_waiting_task_to_the_end(sdk_stream: Client, sdk: Client) -> None:
    asked = await send_for_task(sdk, user_message("ask:Subscribe?;chunks:2"))
    assert asked.status.state == S.TASK_STATE_INPUT_REQUIRED

    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=asked.id))
    try:
        async with asyncio.timeout(WAIT_S):
            first = await anext(events)
        assert kind(first) == "task" and first.task.id == asked.id
        assert first.task.status.state == S.TASK_STATE_INPUT_REQUIRED
        await send_for_task(sdk, user_message("yes", task_id=asked.id), return_immediately=True)
        after = await collect(events)
    finally:
        await events.aclose()
    state, texts = fold([first, *after])
    assert state == S.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "answer:yeschunk-0 chunk-1 "


async def test_subscribe_to_a_finished_task(sdk_stream: Client, sdk: Client, protocol: str) -> None:
    task = await send_for_task(sdk, user_message("say:done"))
    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=task.id))
    if protocol == "1.0":
        with pytest.raises(UnsupportedOperationError):  # nothing left to subscribe to (§3.1.6)
            await collect(events)
    else:
        # The v0.3 proto: "If the task is complete the stream will return the completed task and close".
        got = await collect(events)
        assert [kind(e) for e in got] == ["task"] and state_of(got[0]) == S.TASK_STATE_COMPLETED


async def test_unknown_task_is_task_not_found(sdk: Client, sdk_stream: Client) -> None:
    with pytest.raises(TaskNotFoundError):
        await sdk.get_task(GetTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await sdk.cancel_task(CancelTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await collect(sdk_stream.subscribe(SubscribeToTaskRequest(id="no-such-task")))


async def test_metrics_count_grpc_calls_by_version_method_and_code(
    grpc_server: ServerProcess, sdk: Client, protocol: str
) -> None:
    async with httpx.AsyncClient(base_url=grpc_server.base_url, timeout=30) as http:
        before = await scrape(http)
        await send_for_task(sdk, user_message("say:counted"))
        with pytest.raises(TaskNotFoundError):
            await sdk.get_task(GetTaskRequest(id="no-such-task"))
        after = await scrape(http)
    calls = "a2a_grpc_requests_total"
    assert delta(before, after, calls, version=protocol, method="SendMessage", code="OK") == 1
    assert delta(before, after, calls, version=protocol, method="GetTask", code="NOT_FOUND") == 1
    timed = "a2a_grpc_request_duration_seconds_count"
    assert delta(before, after, timed, version=protocol, method="GetTask") == 1
    assert delta(before, after, "a2a_tasks_created_total") == 1


async def test_push_configs_round_trip(sdk: Client) -> None:
    """Create, get, list and delete a webhook (a public address literal: the SSRF guard refuses private
    ones; deleted at the end so no delivery is left waiting)."""
    task = await send_for_task(sdk, user_message("say:x"))
    url = "https://93.184.215.14/hook"
    created = await sdk.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="cfg-1", url=url, token="secret")
    )
    assert created.id == "cfg-1" and created.url == url and created.token != "secret"
    ref = GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
    got = await sdk.get_task_push_notification_config(ref)
    assert got.url == url and got.task_id == task.id
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
        await sdk.get_task_push_notification_config(ref)


async def test_extended_card_with_a_key(sdk: Client) -> None:
    card = await sdk.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert "admin" in [s.id for s in card.skills]


# ---- raw stubs: what the SDK hides ------------------------------------------------------------------


async def test_errors_carry_the_status_code_and_error_info(grpc_server: ServerProcess) -> None:
    async with channel(address(grpc_server), ALICE) as ch:
        v10, v03 = a2a_pb2_grpc.A2AServiceStub(ch), a2a_v0_3_pb2_grpc.A2AServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await v10.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        info = error_info(missing.value)
        assert (info.reason, info.domain) == ("TASK_NOT_FOUND", "a2a-protocol.org")

        with pytest.raises(grpc.aio.AioRpcError) as old:
            await v03.GetTask(a2a_v0_3_pb2.GetTaskRequest(name="tasks/no-such-task"))
        assert old.value.code() == grpc.StatusCode.NOT_FOUND
        assert old.value.details().startswith("TaskNotFoundError: ")
        assert error_info(old.value).reason == "TASK_NOT_FOUND"

        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await v10.SendMessage(a2a_pb2.SendMessageRequest())  # no message
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(bad.value).reason == "INVALID_PARAMS"
        with pytest.raises(grpc.aio.AioRpcError) as bad_name:
            await v03.GetTask(a2a_v0_3_pb2.GetTaskRequest(name="not-a-task-name"))
        assert bad_name.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        with pytest.raises(grpc.aio.AioRpcError) as version:
            await v10.GetTask(a2a_pb2.GetTaskRequest(id="x"), metadata=[("a2a-version", "0.3")])
        assert version.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(version.value).reason == "VERSION_NOT_SUPPORTED"


async def test_what_the_json_bindings_refuse_is_refused_here_too(grpc_server: ServerProcess) -> None:
    """A NUL character (no database text holds one) and a timestamp ProtoJSON cannot print: INVALID_ARGUMENT,
    never INTERNAL."""
    async with channel(address(grpc_server), ALICE) as ch:
        v10 = a2a_pb2_grpc.A2AServiceStub(ch)
        nul = a2a_pb2.Message(message_id="m-nul", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="a\x00b")])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await v10.SendMessage(a2a_pb2.SendMessageRequest(message=nul))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(refused.value).reason == "INVALID_REQUEST"
        far = a2a_pb2.ListTasksRequest()
        far.status_timestamp_after.seconds = 10**13
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await v10.ListTasks(far)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_no_credential_is_unauthenticated(grpc_server: ServerProcess) -> None:
    async with channel(address(grpc_server)) as ch:
        for call in (
            a2a_pb2_grpc.A2AServiceStub(ch).GetTask(a2a_pb2.GetTaskRequest(id="x")),
            a2a_v0_3_pb2_grpc.A2AServiceStub(ch).GetAgentCard(a2a_v0_3_pb2.GetAgentCardRequest()),
            a2a_pb2_grpc.A2AServiceStub(ch).GetTask(
                a2a_pb2.GetTaskRequest(id="x"), metadata=[("x-api-key", "nope")]
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert error_info(refused.value).reason == "UNAUTHENTICATED"


async def test_undecodable_or_oversized_requests_are_refused_and_the_server_keeps_serving(
    grpc_server: ServerProcess,
) -> None:
    garbage = b"\x0a\xff\xff"  # field 1, length-delimited, longer than what follows
    async with channel(address(grpc_server), ALICE) as ch:
        for method in ("/lf.a2a.v1.A2AService/SendMessage", "/a2a.v1.A2AService/GetTask"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await ch.unary_unary(method)(garbage)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
        with pytest.raises(grpc.aio.AioRpcError) as stream:
            await anext(aiter(ch.unary_stream("/lf.a2a.v1.A2AService/SendStreamingMessage")(garbage)))
        assert stream.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        # A message over MAX_BODY_BYTES is refused by gRPC itself, before any of it is read.
        big = a2a_pb2.Message(
            message_id="m-big", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="x" * MAX_BYTES)]
        )
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await a2a_pb2_grpc.A2AServiceStub(ch).SendMessage(a2a_pb2.SendMessageRequest(message=big))
        assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        task = await a2a_pb2_grpc.A2AServiceStub(ch).SendMessage(
            a2a_pb2.SendMessageRequest(
                message=a2a_pb2.Message(
                    message_id="m-after", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="still here")]
                )
            )
        )
        assert task.task.status.state == a2a_pb2.TASK_STATE_COMPLETED


async def test_owners_are_kept_apart(grpc_server: ServerProcess) -> None:
    """The authenticated principal owns what a call creates: bob cannot read alice's task."""
    async with (
        channel(address(grpc_server), ALICE) as alice_ch,
        channel(address(grpc_server), {"x-api-key": KEYS["bob"]}) as bob_ch,
    ):
        sent = await a2a_pb2_grpc.A2AServiceStub(alice_ch).SendMessage(
            a2a_pb2.SendMessageRequest(
                message=a2a_pb2.Message(
                    message_id="m-own", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="mine")]
                )
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await a2a_pb2_grpc.A2AServiceStub(bob_ch).GetTask(a2a_pb2.GetTaskRequest(id=sent.task.id))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_stopping_server_ends_streams_saying_where_to_resume(tmp_path) -> None:
    """SIGTERM while a subscription is open: the stream ends at once with UNAVAILABLE and the resume
    cursor (`last-event-id`), as the SSE streams end with a comment asking for a resubscribe."""
    port = free_port()
    srv = await make_server("sqlite", tmp_path, GRPC_PORT=str(port))
    try:
        async with channel(f"127.0.0.1:{port}") as ch:
            stub = a2a_pb2_grpc.A2AServiceStub(ch)
            asked = await stub.SendMessage(
                a2a_pb2.SendMessageRequest(
                    message=a2a_pb2.Message(
                        message_id="m-wait", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="ask:Wait?")]
                    )
                )
            )
            assert asked.task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
            stream = stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=asked.task.id))
            async with asyncio.timeout(WAIT_S):
                first = await stream.read()
                assert first.WhichOneof("payload") == "task"
                srv.proc.terminate()  # type: ignore[union-attr]
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    while await stream.read() is not grpc.aio.EOF:
                        pass
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in ended.value.details() and "last-event-id" in ended.value.details()
        assert int(error_info(ended.value).metadata["lastEventId"]) > 0
    finally:
        srv.stop()


async def test_usage_is_in_the_task_metadata(sdk: Client, sdk_stream: Client) -> None:
    await usage_round_trip(sdk, sdk_stream)


async def test_a_message_without_id_or_role_naming_only_its_context_answers_the_waiting_task(
    grpc_server: ServerProcess,
) -> None:
    """Both protos: a message with no message_id (made by the server) and no role (the user's) is sent,
    and one that names only the context of a task waiting for input answers that task."""
    async with channel(address(grpc_server), ALICE) as ch:
        v10 = a2a_pb2_grpc.A2AServiceStub(ch)
        asked = await v10.SendMessage(
            a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(parts=[a2a_pb2.Part(text="ask:Go?")]))
        )
        assert asked.task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
        first = asked.task.history[0]
        assert first.role == a2a_pb2.ROLE_USER and first.message_id
        answer = a2a_pb2.Message(context_id=asked.task.context_id, parts=[a2a_pb2.Part(text="go")])
        done = await v10.SendMessage(a2a_pb2.SendMessageRequest(message=answer))
        assert (done.task.id, done.task.status.state) == (asked.task.id, a2a_pb2.TASK_STATE_COMPLETED)

        v03 = a2a_v0_3_pb2_grpc.A2AServiceStub(ch)
        text = a2a_v0_3_pb2.Part(text="ask:Again?")
        asked = await v03.SendMessage(
            a2a_v0_3_pb2.SendMessageRequest(request=a2a_v0_3_pb2.Message(content=[text]))
        )
        assert asked.task.status.state == a2a_v0_3_pb2.TASK_STATE_INPUT_REQUIRED
        answer03 = a2a_v0_3_pb2.Message(
            context_id=asked.task.context_id, content=[a2a_v0_3_pb2.Part(text="ok")]
        )
        done03 = await v03.SendMessage(a2a_v0_3_pb2.SendMessageRequest(request=answer03))
        assert (done03.task.id, done03.task.status.state) == (
            asked.task.id,
            a2a_v0_3_pb2.TASK_STATE_COMPLETED,
        )
