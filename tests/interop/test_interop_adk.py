"""Interop: Google ADK's `RemoteA2aAgent` (google-adk 2.13.0) drives the real server, as an ADK user runs it.

ADK runs in a venv of its own, once on each a2a-sdk it supports (`a2a03`: 0.3.26, `a2a13`: 1.3.0;
`tests/support/frameworks/`). `tests/support/frameworks/adk_driver.py` makes the remote agent from the
card's URL string, runs it with no model as the root agent of an `InMemoryRunner` (or as the two nodes of a
`Workflow` / `SequentialAgent`), and prints what ADK showed, event by event. Blocking or streaming is the
A2A client's `ClientConfig(streaming=...)`, given through `a2a_client_factory`; the driver records the
JSON-RPC methods it put on the wire, so each test also checks which mode really ran.

The server runs with `make run`'s defaults (no PUBLIC_URL, GRPC_PORT=0: ADK refuses a card with an
interface off the card's origin), and ADK fetches the card through 127.0.0.1. One driver run per venv and
mode runs every scenario (the four runs in parallel, once per module); each test checks one thing of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support import frameworks
from tests.support.rpc import call
from tests.support.server import ServerProcess, free_port

VENVS = ["a2a03", "a2a13"]
MODES = ["blocking", "streaming"]
SCENARIOS = ["send", "ask", "ask-reply", "second-turn", "workflow", "sequential"]
ASK_CALL = "mock_function_call_for_required_user_input"  # what ADK makes of an input-required question
QUESTION, ANSWER = "what colour?", "blue"
RESPONSE = "assistant-response"

# The JSON-RPC method the client must have used, by a2a-sdk and mode: 0.3 speaks v0.3, 1.3 picks the
# card's v1.0 JSON-RPC interface.
METHODS = {
    ("a2a03", "blocking"): "message/send",
    ("a2a03", "streaming"): "message/stream",
    ("a2a13", "blocking"): "SendMessage",
    ("a2a13", "streaming"): "SendStreamingMessage",
}


# ADK's first event of a streamed turn is the `submitted` Task snapshot, which has no message: ADK turns it
# into an Event with no content, neither partial nor a function call, so `is_final_response()` is True on it.
# The loop of ADK's own quickstart (`if event.is_final_response(): ...; break`) stops there and shows nothing.
EMPTY_FIRST_FINAL = pytest.mark.xfail(
    strict=True,
    reason=(
        "google/adk/a2a/converters/event_converter.py:285: the streamed submitted Task snapshot (no message) "
        "becomes a content-less Event that google/adk/events/event.py:303 is_final_response() calls final "
        "(yielded by google/adk/a2a/agent/_remote_a2a_agent.py:1619)"
    ),
)

# A streamed reply's text comes in an artifact-update while the task is still `working` (the `completed`
# status that follows carries no message), and ADK promotes a remote agent's text to its workflow node's
# output only from an event whose recorded task state is final. On a2a-sdk 1.x the recorded state is
# `TASK_STATE_WORKING`, which the check does not recognise, so the same text is promoted there.
STREAMED_OUTPUT_NOT_PROMOTED = pytest.mark.xfail(
    strict=True,
    reason=(
        "google/adk/a2a/agent/_remote_a2a_agent.py:2216: _promote_response_to_output skips every event "
        "whose task state is 'working', and a streamed reply's text only comes in those, so the workflow "
        "node gets no output (on 0.3; on 1.x the proto state name slips past the check)"
    ),
)


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def installed() -> None:
    """The framework venvs (a no-op once built)."""
    frameworks.install()


@pytest.fixture(scope="module")
async def adk_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    """A server as `make run` starts it: no gRPC, no PUBLIC_URL (the card follows the origin fetched)."""
    server = await make_server("sqlite", tmp_path_factory.mktemp("adk"), GRPC_PORT="0", PUBLIC_URL="")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def runs(installed: None, adk_server: ServerProcess) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Every scenario's result, by (venv, mode) and scenario name: one driver run per venv and mode."""
    card = f"{adk_server.base_url}/.well-known/agent-card.json"

    def drive(venv: str, mode: str) -> list[dict[str, Any]]:
        args = ["--url", card, "--streaming", "on" if mode == "streaming" else "off"]
        for scenario in SCENARIOS:
            args += ["--scenario", scenario]
        return frameworks.run_driver(venv, "adk_driver", *args)

    keys = [(venv, mode) for venv in VENVS for mode in MODES]
    with ThreadPoolExecutor(len(keys)) as pool:
        results = dict(zip(keys, pool.map(lambda key: drive(*key), keys), strict=True))
    return {key: {r["scenario"]: r for r in lines} for key, lines in results.items()}


def scenario(
    runs: dict[tuple[str, str], dict[str, dict[str, Any]]], venv: str, mode: str, name: str
) -> dict[str, Any]:
    """A scenario's result, which must have run through (each turn is checked by the tests)."""
    result = runs[venv, mode].get(name)
    assert result is not None, f"{venv}/{mode}: the driver printed no {name!r} result"
    assert result["ok"], f"{venv}/{mode} {name}: {result['error']}\n{result.get('traceback', '')}"
    return result


def ended(result: dict[str, Any], index: int) -> dict[str, Any]:
    """Turn `index`, which must have ended (no driver timeout, no exception) with no ADK error event."""
    turn = result["turns"][index]
    where = f"{result['scenario']} (streaming={result['streaming']}) turn {index} {turn['sent']!r}"
    assert turn["error"] is None, f"{where}: {turn['error']}\n{turn.get('traceback', '')}\n{describe(turn)}"
    errors = [e["error"] for e in turn["events"] if e["error"]]
    assert not errors, f"{where}: ADK showed errors {errors}\n{describe(turn)}"
    return turn


def describe(turn: dict[str, Any]) -> str:
    return json.dumps(turn["events"], indent=1)[:6000]


def texts(turn: dict[str, Any], author: str | None = None) -> list[str]:
    """The (non-thought) text ADK showed in the turn, event by event."""
    return [t for e in turn["events"] if author in (None, e["author"]) for t in e["texts"]]


def methods(result: dict[str, Any]) -> list[str]:
    return [c["method"] for c in result["wire"] if c["http"] == "POST"]


def assert_mode(result: dict[str, Any], venv: str, mode: str) -> None:
    want = METHODS[venv, mode]
    assert methods(result) and set(methods(result)) == {want}, (
        f"{venv}/{mode}: ADK's client should have called only {want}, called {methods(result)}"
    )


def params(*marks: tuple[str, str, pytest.MarkDecorator]) -> list[Any]:
    """(venv, mode) pairs, with a mark on the listed ones."""
    marked = {(venv, mode): mark for venv, mode, mark in marks}
    return [
        pytest.param(
            venv, mode, marks=[marked[venv, mode]] if (venv, mode) in marked else [], id=f"{venv}-{mode}"
        )
        for venv in VENVS
        for mode in MODES
    ]


# ---- the card -----------------------------------------------------------------------------------


@pytest.mark.parametrize("venv", VENVS)
def test_card_resolved_from_loopback_url(runs: Any, adk_server: ServerProcess, venv: str) -> None:
    """ADK fetched the card from the URL it was given, validated it (every interface must be on the card's
    origin: no gRPC `host:port`) and sent the message to the card's JSON-RPC URL on that origin."""
    base = adk_server.base_url
    result = scenario(runs, venv, "blocking", "send")
    ended(result, 0)
    first = result["wire"][0]
    assert (first["http"], first["url"]) == ("GET", f"{base}/.well-known/agent-card.json"), result["wire"]
    agent = result["agents"]["scripted"]
    assert agent["card_name"] == "Scripted Test Agent", agent
    assert agent["card_urls"] and all(url.startswith(f"{base}/") for url in agent["card_urls"]), (
        f"the card should advertise only {base} (the origin it was fetched through): {agent['card_urls']}"
    )
    assert "Follows a script in the message text" in agent["description"], (
        f"ADK should adopt the card's description: {agent['description']!r}"
    )
    posts = [c["url"] for c in result["wire"] if c["http"] == "POST"]
    assert posts == [f"{base}/a2a/jsonrpc"], f"the send should go to the card's JSON-RPC URL: {posts}"


@pytest.mark.parametrize("venv", VENVS)
async def test_a_card_that_lists_grpc_is_refused_by_adk(installed: None, tmp_path: Any, venv: str) -> None:
    """Why `make run` serves no gRPC unless GRPC_PORT is given (docs/protocol.md): ADK refuses a card whose
    gRPC interface, a `host:port` of its own port, is off the card's origin, whatever its address. If a
    later ADK takes such a card, this fails and the default can be revisited."""
    server = await make_server("sqlite", tmp_path, GRPC_PORT=str(free_port()))
    try:
        card = f"{server.base_url}/.well-known/agent-card.json"
        args = ("--url", card, "--streaming", "off", "--scenario", "send")
        (result,) = await asyncio.to_thread(frameworks.run_driver, venv, "adk_driver", *args)
    finally:
        server.stop()
    errors = [e["error"] for turn in result["turns"] for e in turn["events"] if e["error"]]
    assert any("Agent card RPC URL must use https, or http on a loopback host" in e for e in errors), result
    assert not [c for c in result["wire"] if c["http"] == "POST"], "ADK sent nothing to a card it refused"


# ---- one send -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("venv", "mode"), params())
def test_send_shows_echo(runs: Any, venv: str, mode: str) -> None:
    """A blocking send and a streaming send each show the agent's reply, and the task's end."""
    result = scenario(runs, venv, mode, "send")
    assert_mode(result, venv, mode)
    turn = ended(result, 0)
    assert texts(turn) == ["hello"], f"ADK should show the echo once:\n{describe(turn)}"
    assert turn["events"][-1]["state"] == "completed", describe(turn)
    assert not any(e["partial"] for e in turn["events"]), f"a whole reply is not partial:\n{describe(turn)}"


@pytest.mark.parametrize(
    ("venv", "mode"),
    params(("a2a03", "streaming", EMPTY_FIRST_FINAL), ("a2a13", "streaming", EMPTY_FIRST_FINAL)),
)
def test_first_final_response_is_the_reply(runs: Any, venv: str, mode: str) -> None:
    """The loop of ADK's quickstart reads the first event whose `is_final_response()` is True and stops:
    that event must carry the reply."""
    turn = ended(scenario(runs, venv, mode, "send"), 0)
    first = next((e for e in turn["events"] if e["final"]), None)
    assert first is not None, f"no final response:\n{describe(turn)}"
    assert first["texts"] == ["hello"], f"the first final response shows {first['texts']}:\n{describe(turn)}"


# ---- a question and its answer ------------------------------------------------------------------


@pytest.mark.parametrize(("venv", "mode"), params())
def test_question_shown(runs: Any, venv: str, mode: str, record_property: Any) -> None:
    """`ask:what colour?` ends the turn at input-required, and ADK shows the question's text as its
    human-input call (not some artifact's JSON). Streaming: the stream ends at the question, so the turn
    ends (the driver's 30 s turn timeout did not fire); the measured times are recorded."""
    result = scenario(runs, venv, mode, "ask")
    assert_mode(result, venv, mode)
    turn = ended(result, 0)
    record_property("question_at_s", turn["question_at"])
    record_property("turn_s", turn["seconds"])
    calls = [c for e in turn["events"] for c in e["calls"]]
    assert [(c["name"], c["args"]) for c in calls] == [(ASK_CALL, {"input_required": QUESTION})], (
        f"ADK should show the question once, as its input-required call:\n{describe(turn)}"
    )
    assert texts(turn) == [], f"nothing but the question should be shown:\n{describe(turn)}"
    assert turn["events"][-1]["state"] == "input-required", describe(turn)
    question = next(e for e in turn["events"] if e["calls"])
    assert question["long_running"] == [calls[0]["id"]], f"ADK waits on the question call:\n{describe(turn)}"


@pytest.mark.parametrize("how", ["text", "function-response"])
@pytest.mark.parametrize(("venv", "mode"), params())
async def test_answer_continues_task(
    runs: Any, adk_server: ServerProcess, venv: str, mode: str, how: str
) -> None:
    """The user's answer (a new text message, or the ADK way: a function response to the question call)
    goes to the same A2A task, which says `answer:blue` and completes; the server's task agrees."""
    result = scenario(runs, venv, mode, "ask" if how == "text" else "ask-reply")
    asked, answered = ended(result, 0), ended(result, 1)
    question = next(e for e in asked["events"] if e["calls"])
    task_id, context_id = question["task_id"], question["context_id"]
    assert task_id and context_id, describe(asked)
    sent = answered["events"][0]["request"]
    assert sent == {"task_id": task_id, "context_id": context_id}, (
        f"the answer should be sent to the asking task {task_id} in {context_id}, was sent as {sent}"
    )
    assert {(e["task_id"], e["context_id"]) for e in answered["events"]} == {(task_id, context_id)}, describe(
        answered
    )
    assert texts(answered) == [f"answer:{ANSWER}"], (
        f"ADK should show the agent's answer:\n{describe(answered)}"
    )
    assert answered["events"][-1]["state"] == "completed", describe(answered)

    async with httpx.AsyncClient(base_url=adk_server.base_url, timeout=30) as client:
        got = await call(client, "tasks/get", {"id": task_id})
    task = got.get("result")
    assert task is not None, f"tasks/get {task_id}: {got}"
    assert task["status"]["state"] == "completed", task["status"]
    users = [p.get("text") for m in task["history"] if m["role"] == "user" for p in m["parts"]]
    assert users == ["ask:what colour?", ANSWER], (
        f"the task's history should hold both user messages: {users}"
    )
    artifacts = [(a.get("name"), [p.get("text") for p in a["parts"]]) for a in task.get("artifacts", [])]
    assert artifacts == [(RESPONSE, [f"answer:{ANSWER}"])], f"the task's artifacts: {artifacts}"


# ---- a second turn ------------------------------------------------------------------------------


@pytest.mark.parametrize(("venv", "mode"), params())
def test_second_turn_same_context(runs: Any, venv: str, mode: str) -> None:
    """A second turn in the same ADK session is a new task in the first turn's A2A context."""
    result = scenario(runs, venv, mode, "second-turn")
    first, second = ended(result, 0), ended(result, 1)
    assert texts(first) == ["hello"] and texts(second) == ["again"], describe(first) + describe(second)
    contexts = {e["context_id"] for e in first["events"]}
    assert len(contexts) == 1 and None not in contexts, describe(first)
    (context_id,) = contexts
    assert second["events"][0]["request"]["context_id"] == context_id, (
        f"ADK should send the second turn in context {context_id}:\n{describe(second)}"
    )
    assert {e["context_id"] for e in second["events"]} == {context_id}, describe(second)
    tasks = {e["task_id"] for e in first["events"]}, {e["task_id"] for e in second["events"]}
    assert len(tasks[0]) == len(tasks[1]) == 1 and tasks[0] != tasks[1], f"one task per turn: {tasks}"
    assert second["events"][-1]["state"] == "completed", describe(second)


# ---- two remote agents in a workflow ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["workflow", "sequential"])
@pytest.mark.parametrize(("venv", "mode"), params())
def test_pipeline_runs_both_in_order(runs: Any, venv: str, mode: str, kind: str) -> None:
    """A `Workflow` (ADK 2's) or a `SequentialAgent` of two remote agents: the first runs and shows its
    reply, then the second, which got the first's reply (ADK forwards it as quoted context)."""
    result = scenario(runs, venv, mode, kind)
    assert_mode(result, venv, mode)
    turn = ended(result, 0)
    authors = [e["author"] for e in turn["events"]]
    assert (
        authors
        and authors == sorted(authors, key=["first", "second"].index)
        and set(authors)
        == {
            "first",
            "second",
        }
    ), f"first's events, then second's: {authors}"
    assert texts(turn, "first") == ["hello"], describe(turn)
    (second,) = texts(turn, "second")
    assert second.startswith("hello") and "[first] said:" in second, (
        f"the second agent should have been sent the user's text and the first's reply: {second!r}"
    )
    for author in ("first", "second"):
        events = [e for e in turn["events"] if e["author"] == author]
        assert events[-1]["state"] == "completed", describe(turn)
    assert len({e["task_id"] for e in turn["events"]}) == 2, describe(turn)


@pytest.mark.parametrize(("venv", "mode"), params(("a2a03", "streaming", STREAMED_OUTPUT_NOT_PROMOTED)))
def test_workflow_nodes_output_their_reply(runs: Any, venv: str, mode: str) -> None:
    """In a `Workflow` each remote agent's reply is its node's output (`message_as_output`), which is what
    a next node would be given."""
    turn = ended(scenario(runs, venv, mode, "workflow"), 0)
    for author in ("first", "second"):
        outputs = [e["texts"] for e in turn["events"] if e["author"] == author and e["message_as_output"]]
        assert len(outputs) == 1 and outputs[0], (
            f"{author}: one event should be its output:\n{describe(turn)}"
        )
        assert outputs[0] == texts(turn, author), describe(turn)
