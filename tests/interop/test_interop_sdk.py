"""Interop: the official Python A2A client (`a2a-sdk` 1.3.0) drives the real server over JSON-RPC.

The client is built the way an SDK user builds one: `ClientFactory.create_from_url` fetches our agent
card, sees `protocolVersion: 0.3.0` with a JSONRPC interface, and picks its v0.3 compat JSON-RPC
transport. Every call then goes through the SDK's own request building and response parsing, so a
wire-shape mismatch between the server and the SDK fails here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.helpers import get_message_text, get_text_parts, new_text_message
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)
from google.protobuf import json_format

from tests.support.server import ServerProcess

RESPONSE = "assistant-response"
WAIT_S = 30  # an upper bound for a condition that normally holds within milliseconds

S = TaskState
ORDER = [S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]


# ---- fixtures -----------------------------------------------------------------------------------


V10_NAMES = {
    "SendMessage": "message/send",
    "SendStreamingMessage": "message/stream",
    "GetTask": "tasks/get",
    "CancelTask": "tasks/cancel",
    "SubscribeToTask": "tasks/resubscribe",
    "ListTasks": "ListTasks",
}


class Wire:
    """What the SDK put on the wire: (JSON-RPC method, A2A-Version header) per POST.

    `calls` is what was sent; `seen` names the same calls in v0.3 terms with the version checked against the
    protocol under test, so one assertion reads the same for both protocols.
    """

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.calls: list[tuple[str, str | None]] = []

    async def record(self, request: httpx.Request) -> None:
        if request.method == "POST":
            body = json.loads(request.content)
            self.calls.append((body["method"], request.headers.get("A2A-Version")))

    @property
    def seen(self) -> list[tuple[str, str]]:
        out = []
        for method, version in self.calls:
            assert version == self.protocol, (method, version)
            out.append((V10_NAMES.get(method, method) if self.protocol == "1.0" else method, "0.3"))
        return out


@pytest.fixture(params=["1.0", "0.3"])
def protocol(request: pytest.FixtureRequest) -> str:
    """The protocol version the SDK client speaks: v1.0 (its preference) or v0.3 (compat mode)."""
    return request.param


@pytest.fixture
def wire(protocol: str) -> Wire:
    return Wire(protocol)


def only_v03(card: AgentCard) -> AgentCard:
    """The card as a client that only knows v0.3 sees it: just its v0.3 interfaces."""
    v03 = [i for i in card.supported_interfaces if i.protocol_version.startswith("0.3")]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(v03)
    return card


@asynccontextmanager
async def sdk_client(server: ServerProcess, wire: Wire, *, streaming: bool) -> AsyncIterator[Client]:
    """An SDK client made from our agent card; `streaming=False` makes `send_message` a plain send."""
    async with httpx.AsyncClient(timeout=WAIT_S, event_hooks={"request": [wire.record]}) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
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
    """Non-streaming client: `send_message` is `message/send`, one Task back."""
    async with sdk_client(server, wire, streaming=False) as client:
        yield client


@pytest.fixture
async def sdk_stream(server: ServerProcess, wire: Wire) -> AsyncIterator[Client]:
    """Streaming client: `send_message` is `message/stream`, events until the server ends the stream."""
    async with sdk_client(server, wire, streaming=True) as client:
        yield client


# ---- helpers ------------------------------------------------------------------------------------


def user_message(text: str, *, task_id: str | None = None, context_id: str | None = None) -> Message:
    return new_text_message(text, task_id=task_id, context_id=context_id, role=Role.ROLE_USER)


def send_request(msg: Message, *, return_immediately: bool = False) -> SendMessageRequest:
    return SendMessageRequest(
        message=msg, configuration=SendMessageConfiguration(return_immediately=return_immediately)
    )


async def send_for_task(client: Client, msg: Message, *, return_immediately: bool = False) -> Task:
    """A non-streaming send: exactly one StreamResponse carrying the task."""
    events = [e async for e in client.send_message(send_request(msg, return_immediately=return_immediately))]
    assert len(events) == 1, events
    assert events[0].HasField("task"), events[0]
    return events[0].task


def artifact_named(task: Task, name: str) -> Artifact:
    found = [a for a in task.artifacts if a.name == name]
    assert len(found) == 1, [a.name for a in task.artifacts]
    return found[0]


def text_of(artifact: Artifact) -> str:
    return "".join(get_text_parts(artifact.parts))


def kind(ev: StreamResponse) -> str:
    return ev.WhichOneof("payload")


def state_of(ev: StreamResponse) -> TaskState | None:
    if ev.HasField("task"):
        return ev.task.status.state
    if ev.HasField("status_update"):
        return ev.status_update.status.state
    return None


class Stream:
    """Reads an SDK event stream step by step, each step bounded in time, and keeps what it read."""

    def __init__(self, client: Client, request: SendMessageRequest) -> None:
        self.gen = client.send_message(request)
        self.events: list[StreamResponse] = []

    async def next(self) -> StreamResponse:
        async with asyncio.timeout(WAIT_S):
            ev = await anext(self.gen)
        self.events.append(ev)
        return ev

    async def until(self, cond: Callable[[StreamResponse], bool]) -> StreamResponse:
        while True:
            ev = await self.next()
            if cond(ev):
                return ev

    async def rest(self) -> list[StreamResponse]:
        """Everything until the server ends the stream."""
        start = len(self.events)
        async with asyncio.timeout(WAIT_S):
            async for ev in self.gen:
                self.events.append(ev)
        return self.events[start:]

    async def aclose(self) -> None:
        await self.gen.aclose()


@asynccontextmanager
async def open_stream(client: Client, msg: Message) -> AsyncIterator[Stream]:
    stream = Stream(client, send_request(msg))
    try:
        yield stream
    finally:
        await stream.aclose()


def fold(events: list[StreamResponse]) -> tuple[TaskState, dict[str, str]]:
    """What a client rebuilds from a stream: the last state and each artifact's text by name."""
    assert events[0].HasField("task")
    state = events[0].task.status.state
    names = {a.artifact_id: a.name for a in events[0].task.artifacts}
    texts = {a.artifact_id: text_of(a) for a in events[0].task.artifacts}
    for ev in events[1:]:
        if ev.HasField("status_update"):
            state = ev.status_update.status.state
        elif ev.HasField("artifact_update"):
            up = ev.artifact_update
            aid = up.artifact.artifact_id
            if up.append:
                assert aid in texts, f"append to unknown artifact {aid}"
                texts[aid] += text_of(up.artifact)
            else:
                names[aid] = up.artifact.name
                texts[aid] = text_of(up.artifact)
    return state, {names[aid]: text for aid, text in texts.items()}


# ---- tests --------------------------------------------------------------------------------------


async def test_sdk_picks_the_jsonrpc_transport_of_its_protocol(sdk: Client, wire: Wire) -> None:
    transport = sdk._transport  # type: ignore[attr-defined]
    expected = JsonRpcTransport if wire.protocol == "1.0" else CompatJsonRpcTransport
    assert type(transport) is expected
    assert transport.url.endswith("/a2a/jsonrpc")
    card = transport.agent_card
    interfaces = {(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces}
    assert ("JSONRPC", wire.protocol) in interfaces
    assert card.capabilities.streaming

    await send_for_task(sdk, user_message("say:hi"))
    method = "SendMessage" if wire.protocol == "1.0" else "message/send"
    assert wire.calls == [(method, wire.protocol)]


async def test_send_blocking_completes_with_echoed_text(sdk: Client, wire: Wire) -> None:
    text = "hello from the official sdk"
    task = await send_for_task(sdk, user_message(text))

    assert task.id and task.context_id
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert text_of(artifact_named(task, RESPONSE)) == text
    assert [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER] == [text]
    assert wire.seen == [("message/send", "0.3")]


async def test_stream_delivers_task_then_updates_until_completed(sdk_stream: Client, wire: Wire) -> None:
    async with open_stream(sdk_stream, user_message("chunks:5")) as stream:
        events = await stream.rest()

    assert wire.seen == [("message/stream", "0.3")]
    assert kind(events[0]) == "task", "the stream opens with the task"
    assert all(kind(e) in ("status_update", "artifact_update") for e in events[1:])
    task_id = events[0].task.id
    assert all(getattr(e, kind(e)).task_id == task_id for e in events[1:]), (
        "every update names the streamed task"
    )

    states = [s for s in map(state_of, events) if s is not None]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert kind(events[-1]) == "status_update", "the completed status is the last event"
    assert [ORDER.index(s) for s in states] == sorted(ORDER.index(s) for s in states), states

    state, texts = fold(events)
    assert state == TaskState.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "".join(f"chunk-{i} " for i in range(5))


async def test_stream_ends_at_the_question_and_the_answers_stream_has_the_rest_in_order(
    sdk_stream: Client, wire: Wire
) -> None:
    """The send's stream ends at input-required (the end of the turn, which the SDK and the agent
    frameworks built on it wait for); the answer, streamed too, carries the rest of the task in exact
    order."""
    async with open_stream(sdk_stream, user_message("ask:Stream on?;chunks:3")) as stream:
        asked = [await stream.next(), *await stream.rest()]
    assert kind(asked[0]) == "task"
    task = asked[0].task
    assert state_of(asked[-1]) == TaskState.TASK_STATE_INPUT_REQUIRED, "the stream ends at the question"
    question = asked[-1].status_update.status.message if kind(asked[-1]) == "status_update" else None
    question = question or asked[-1].task.status.message
    assert get_message_text(question) == "Stream on?"

    answer = user_message("yes", task_id=task.id, context_id=task.context_id)
    async with open_stream(sdk_stream, answer) as stream:
        first = await stream.next()
        after = await stream.rest()
    assert kind(first) == "task" and first.task.id == task.id
    assert first.task.status.state == TaskState.TASK_STATE_WORKING
    kinds = [kind(e) for e in after]
    assert kinds[-1] == "status_update" and state_of(after[-1]) == TaskState.TASK_STATE_COMPLETED
    chunks = [e.artifact_update for e in after[:-1]]
    assert kinds[:-1] == ["artifact_update"] * len(chunks)
    assert chunks[0].artifact.name == RESPONSE
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    # The last chunk carries lastChunk: the final text chunk itself when it arrived together with
    # the agent's done, otherwise an empty closing chunk after it.
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    texts = [text_of(c.artifact) for c in chunks]
    assert texts[:4] == ["answer:yes", "chunk-0 ", "chunk-1 ", "chunk-2 "]
    assert texts[4:] in ([], [""])
    state, folded = fold(stream.events)
    assert state == TaskState.TASK_STATE_COMPLETED
    assert folded[RESPONSE] == "answer:yeschunk-0 chunk-1 chunk-2 "
    assert [m for m, _ in wire.seen] == ["message/stream", "message/stream"]


async def test_get_task_with_history(sdk: Client, wire: Wire) -> None:
    sent = await send_for_task(sdk, user_message("say:hello"))

    got = await sdk.get_task(GetTaskRequest(id=sent.id))
    assert got.id == sent.id
    assert got.context_id == sent.context_id
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert text_of(artifact_named(got, RESPONSE)) == "hello"
    assert len(got.history) == 1
    assert got.history[0].role == Role.ROLE_USER
    assert get_message_text(got.history[0]) == "say:hello"
    assert got.history[0].task_id == sent.id
    assert wire.seen == [("message/send", "0.3"), ("tasks/get", "0.3")]


async def test_cancel_a_running_task(sdk_stream: Client, sdk: Client) -> None:
    async with open_stream(sdk_stream, user_message("sleep:300")) as stream:
        first = await stream.next()
        task_id = first.task.id
        if first.task.status.state != TaskState.TASK_STATE_WORKING:
            await stream.until(lambda e: state_of(e) == TaskState.TASK_STATE_WORKING)

        canceled = await sdk.cancel_task(CancelTaskRequest(id=task_id))
        assert canceled.id == task_id
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED

        after = await stream.rest()
    assert after, "the stream reports the cancel"
    assert kind(after[-1]) == "status_update"
    assert state_of(after[-1]) == TaskState.TASK_STATE_CANCELED

    got = await sdk.get_task(GetTaskRequest(id=task_id))
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await sdk.cancel_task(CancelTaskRequest(id=task_id))
    again = await sdk.get_task(GetTaskRequest(id=task_id))
    assert again.status.state == TaskState.TASK_STATE_CANCELED


async def test_cancel_a_task_started_non_blocking(sdk: Client) -> None:
    task = await send_for_task(sdk, user_message("sleep:300"), return_immediately=True)
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)

    canceled = await sdk.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    got = await sdk.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_CANCELED


async def test_input_required_then_answer_completes(sdk: Client) -> None:
    asked = await send_for_task(sdk, user_message("ask:Proceed?"))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.role == Role.ROLE_AGENT
    assert get_message_text(asked.status.message) == "Proceed?"

    done = await send_for_task(sdk, user_message("go ahead", task_id=asked.id))
    assert done.id == asked.id
    assert done.context_id == asked.context_id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert text_of(artifact_named(done, RESPONSE)) == "answer:go ahead"

    got = await sdk.get_task(GetTaskRequest(id=asked.id))
    assert [(m.role, get_message_text(m)) for m in got.history] == [
        (Role.ROLE_USER, "ask:Proceed?"),
        (Role.ROLE_AGENT, "Proceed?"),
        (Role.ROLE_USER, "go ahead"),
    ]
    last = await sdk.get_task(GetTaskRequest(id=asked.id, history_length=1))
    assert [get_message_text(m) for m in last.history] == ["go ahead"]


async def test_unknown_task_is_task_not_found(sdk: Client) -> None:
    with pytest.raises(TaskNotFoundError):
        await sdk.get_task(GetTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await sdk.cancel_task(CancelTaskRequest(id="no-such-task"))


async def test_unknown_task_on_a_stream_is_task_not_found(sdk_stream: Client) -> None:
    """v0.3 answers the error as the stream's one event, v1.0 as a plain response; the SDK reads both."""
    with pytest.raises(TaskNotFoundError):
        await collect(sdk_stream.subscribe(SubscribeToTaskRequest(id="no-such-task")))


async def collect(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    out = []
    async with asyncio.timeout(WAIT_S):
        async for ev in events:
            out.append(ev)
    return out


async def test_list_tasks(sdk: Client, wire: Wire) -> None:
    first = await send_for_task(sdk, user_message("say:one"))
    second = await send_for_task(sdk, user_message("say:two", context_id=first.context_id))
    request = ListTasksRequest(context_id=first.context_id, page_size=1, include_artifacts=True)
    if wire.protocol == "0.3":
        with pytest.raises(NotImplementedError):  # v0.3 JSON-RPC has no ListTasks: the SDK does not ask
            await sdk.list_tasks(request)
        return
    page = await sdk.list_tasks(request)
    assert [t.id for t in page.tasks] == [second.id], "newest status first"
    assert page.total_size == 2 and page.next_page_token
    assert text_of(artifact_named(page.tasks[0], RESPONSE)) == "two"
    rest = await sdk.list_tasks(
        ListTasksRequest(context_id=first.context_id, page_size=1, page_token=page.next_page_token)
    )
    assert [t.id for t in rest.tasks] == [first.id] and rest.next_page_token == ""
    assert not rest.tasks[0].artifacts, "artifacts only when asked for"
    assert wire.calls[-2:] == [("ListTasks", "1.0")] * 2


async def test_subscribe_follows_a_waiting_task(sdk_stream: Client, sdk: Client, wire: Wire) -> None:
    asked = await send_for_task(sdk, user_message("ask:Subscribe?;chunks:2"))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=asked.id))
    try:
        async with asyncio.timeout(WAIT_S):
            first = await anext(events)
        assert kind(first) == "task" and first.task.id == asked.id, "the current task comes first"
        await send_for_task(sdk, user_message("yes", task_id=asked.id), return_immediately=True)
        after = await collect(events)
    finally:
        await events.aclose()
    state, texts = fold([first, *after])
    assert state == TaskState.TASK_STATE_COMPLETED
    assert texts[RESPONSE] == "answer:yeschunk-0 chunk-1 "
    assert [m for m, _ in wire.seen] == ["message/send", "tasks/resubscribe", "message/send"]


async def test_subscribe_to_a_finished_task(sdk_stream: Client, sdk: Client, wire: Wire) -> None:
    task = await send_for_task(sdk, user_message("say:done"))
    events = sdk_stream.subscribe(SubscribeToTaskRequest(id=task.id))
    if wire.protocol == "1.0":
        with pytest.raises(UnsupportedOperationError):  # nothing left to subscribe to
            await collect(events)
    else:
        got = await collect(events)  # v0.3: the finished task once, then the stream ends
        assert [kind(e) for e in got] == ["task"] and got[0].task.id == task.id


# ---- usage ----------------------------------------------------------------------------------------


def usage_of(metadata: Any) -> dict[str, Any]:
    """The `usage` key of a task's or an event's metadata as the SDK gives it (a protobuf Struct, whose
    numbers are floats)."""
    return json_format.MessageToDict(metadata)["usage"]


async def usage_round_trip(sdk: Client, sdk_stream: Client) -> None:
    """Reported before the question and after the answer: the SDK reads the sum in the task's metadata (on
    the send's task and GetTask), and a stream reads each report on its status update (every binding)."""
    asked = await send_for_task(
        sdk, user_message("usage:m-sdk:100:10:0.5;tool:Read;ask:Proceed?;usage:m-sdk:1:2:0.25")
    )
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert usage_of(asked.metadata)["inputTokens"] == 100
    done = await send_for_task(sdk, user_message("go", task_id=asked.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    usage = usage_of(done.metadata)
    assert (usage["reports"], usage["inputTokens"], usage["outputTokens"], usage["toolCalls"]) == (
        2,
        101,
        12,
        1,
    )
    assert usage["costUsd"] == 0.75 and usage["models"]["m-sdk"]["costSource"] == "reported"
    assert "stateTransitions" in json_format.MessageToDict(done.metadata)
    got = await sdk.get_task(GetTaskRequest(id=asked.id))
    assert usage_of(got.metadata) == usage

    async with open_stream(sdk_stream, user_message("usage:m-sdk:7:3")) as stream:
        events = await stream.rest()
    reports = [
        usage_of(ev.status_update.metadata)
        for ev in events
        if ev.HasField("status_update") and "usage" in json_format.MessageToDict(ev.status_update.metadata)
    ]
    assert [r["models"][0]["inputTokens"] for r in reports] == [7]


async def test_usage_is_in_the_task_metadata_and_on_its_status_event(sdk: Client, sdk_stream: Client) -> None:
    await usage_round_trip(sdk, sdk_stream)
