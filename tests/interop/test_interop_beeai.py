"""Interop: BeeAI Framework's remote A2A agent (`beeai_framework.adapters.a2a.agents.A2AAgent`,
beeai-framework 0.1.85 on a2a-sdk 0.3) against a real server, as a new user runs it.

`tests/support/frameworks/beeai_driver.py` runs in the framework venv (`scripts/install-frameworks.sh`) with
no model: the remote agent is the agent that runs, built from the server's URL as BeeAI's A2A page shows
(`A2AAgent(url=url, memory=UnconstrainedMemory())`, each turn `await agent.run(text).on("update", ...)`).
It runs every scenario once per module in two modes (the run's `streaming` option: `message/stream` or
`message/send`) and prints what BeeAI showed: the run's last message, the A2A events of its `update` handler,
and the requests it sent. The server is `make run`'s defaults: SQLite, `GRPC_PORT=0`, no `PUBLIC_URL`,
reached through 127.0.0.1. Each test checks one thing of that run; the tasks are then read back through
the server (`tasks/get`).

BeeAI's agent keeps the task of an `input-required` answer and the context between runs, so an answer given
as the next run continues the asking task, and a second run is a new task in the same context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support import frameworks
from tests.support.frameworks import only_context, only_send, only_task, task_on_server, texts
from tests.support.server import ServerProcess

AGENT_NAME = "Scripted Test Agent"
RESPONSE = "assistant-response"
QUESTION = "what colour?"
MODES = ["streaming", "blocking"]
RPC = {"streaming": "message/stream", "blocking": "message/send"}


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    """`make run`'s defaults: SQLite, the scripted agent, gRPC off, no PUBLIC_URL."""
    srv = await make_server("sqlite", tmp_path_factory.mktemp("beeai"), GRPC_PORT="0")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def runs(server: ServerProcess) -> dict[tuple[str, str], dict[str, Any]]:
    """Every scenario of the driver in both modes, one driver process: (mode, scenario) → what it printed."""
    frameworks.install()
    lines = frameworks.run_driver("a2a03", "beeai_driver", "--url", server.base_url)
    return {(line["mode"], line["scenario"]): line for line in lines}


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        yield client


# ---- helpers ------------------------------------------------------------------------------------


def scenario(runs: frameworks.Runs, mode: str, name: str) -> dict[str, Any]:
    return frameworks.scenario(runs, mode, name, "BeeAI")


def turns(runs: frameworks.Runs, mode: str, name: str) -> list[dict[str, Any]]:
    return frameworks.turns(runs, mode, name, "BeeAI")


def card_url(server: ServerProcess) -> str:
    return f"{server.base_url}/a2a/jsonrpc"


# ---- the card -----------------------------------------------------------------------------------


def test_card_is_discovered_from_the_loopback_origin(runs: Any, server: ServerProcess) -> None:
    frameworks.check_card(scenario(runs, "streaming", "card"), server.base_url, AGENT_NAME)


@pytest.mark.parametrize("mode", MODES)
def test_every_send_goes_to_the_card_url(runs: Any, server: ServerProcess, mode: str) -> None:
    sent = [w for name in ("echo", "ask", "second-turn") for t in turns(runs, mode, name) for w in t["wire"]]
    assert sent, f"the driver recorded no request in {mode}"
    wrong = [w for w in sent if w["url"] != card_url(server) or w["rpc"] != RPC[mode]]
    assert not wrong, f"{mode}: every send should be {RPC[mode]} to {card_url(server)}: {wrong}"


# ---- one turn -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_send_shows_the_echoed_text(runs: Any, mode: str) -> None:
    (t,) = turns(runs, mode, "echo")
    assert t["text"] == t["sent"], f"{mode}: BeeAI showed {t['text']!r}, not the echo: {t}"
    assert t["state"] == "completed", t
    assert only_send(t)["rpc"] == RPC[mode], t["wire"]
    assert t["memory"] == [f"user: {t['sent']}", f"assistant: {t['sent']}"], t["memory"]


def test_streamed_send_shows_the_events(runs: Any) -> None:
    (t,) = turns(runs, "streaming", "echo")
    kinds = [(e["kind"], e.get("state"), e.get("final")) for e in t["events"]]
    assert kinds[0] == ("task", "submitted", None), kinds
    assert kinds[-1] == ("status-update", "completed", True), kinds
    assert any(e["kind"] == "artifact-update" and e["text"] == t["sent"] for e in t["events"]), t["events"]


# ---- a question, then its answer ----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_ask_shows_the_question_and_the_turn_ends(
    runs: Any, http: httpx.AsyncClient, mode: str, record_property: Any
) -> None:
    question = turns(runs, mode, "ask")[0]  # no error: the driver's timeout did not fire
    record_property(f"beeai_{mode}_ask_turn_seconds", question["seconds"])
    assert question["text"] == QUESTION, f"{mode}: BeeAI showed {question['text']!r}: {question}"
    assert question["state"] == "input-required", f"{mode}: the run's last event: {question}"
    assert question["memory"] == [f"user: {question['sent']}", f"assistant: {QUESTION}"], question["memory"]
    task = await task_on_server(http, only_task(question))
    said = [(m["role"], texts(m["parts"])) for m in task["history"]]
    assert said[:2] == [("user", question["sent"]), ("agent", QUESTION)], f"the task's history: {said}"


def test_streamed_ask_ends_at_input_required(runs: Any) -> None:
    question = turns(runs, "streaming", "ask")[0]
    last = question["events"][-1]
    assert (last["kind"], last["state"], last["final"]) == ("status-update", "input-required", True), question
    assert last["text"] == QUESTION, last


@pytest.mark.parametrize("mode", MODES)
async def test_answer_continues_the_task(runs: Any, http: httpx.AsyncClient, mode: str) -> None:
    question, answer = turns(runs, mode, "ask")
    asked, context = only_task(question), only_context(question)
    sent = only_send(answer)
    assert (sent["task_id"], sent["context_id"]) == (asked, context), (
        f"{mode}: the answer was not sent into the asking task {asked} of context {context}: {sent}"
    )
    assert answer["text"] == f"answer:{answer['sent']}", f"{mode}: BeeAI showed {answer['text']!r}: {answer}"
    assert answer["state"] == "completed", answer
    assert only_task(answer) == asked, answer["task_ids"]
    task = await task_on_server(http, asked)
    assert task["status"]["state"] == "completed", task["status"]
    said = [(m["role"], texts(m["parts"])) for m in task["history"]]
    turn = [("user", question["sent"]), ("agent", QUESTION), ("user", answer["sent"])]
    assert [x for x in said if x[0] == "user" or x[1] == QUESTION] == turn, f"the task's history: {said}"
    (artifact,) = [a for a in task["artifacts"] if a["name"] == RESPONSE]
    assert texts(artifact["parts"]) == f"answer:{answer['sent']}", artifact


# ---- a second turn ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_second_turn_stays_in_the_context(runs: Any, http: httpx.AsyncClient, mode: str) -> None:
    first, second = turns(runs, mode, "second-turn")
    assert second["text"] == second["sent"], f"{mode}: BeeAI showed {second['text']!r}: {second}"
    sent = only_send(second)
    assert sent["context_id"] == only_context(first), (
        f"{mode}: the second turn was not sent in the first turn's context: {sent}"
    )
    assert sent["task_id"] is None, f"{mode}: the second turn was sent into the ended first task: {sent}"
    one, two = [await task_on_server(http, only_task(t)) for t in (first, second)]
    assert one["id"] != two["id"], (one["id"], two["id"])
    assert one["contextId"] == two["contextId"] == only_context(first), (one["contextId"], two["contextId"])
    assert (one["status"]["state"], two["status"]["state"]) == ("completed", "completed")
