"""Drive Google ADK's `RemoteA2aAgent` against a server, as an ADK user does, and print what ADK showed.

Runs inside a framework venv (`a2a03`: a2a-sdk 0.3, `a2a13`: a2a-sdk 1.3; ADK's `_compat` picks the SDK's
shapes). No model: the `RemoteA2aAgent`, made from the card's URL string, is the root agent of an ADK
`InMemoryRunner` (or the two nodes of a `Workflow`, or the two sub-agents of a `SequentialAgent`), and each
turn is `runner.run_async(...)` with the user's message, in one ADK session per scenario.

Streaming or not is the A2A client's choice in ADK 2.13 (`RemoteA2aAgent` does not read
`RunConfig.streaming_mode`): `ClientConfig(streaming=...)` given through `a2a_client_factory`, the way a
user picks it. With no factory ADK's defaults differ by SDK (`_compat.make_client_config`: `streaming=False`
on 0.3, the SDK's `True` on 1.x), so the driver always says which.

    adk_driver.py --url http://127.0.0.1:PORT/.well-known/agent-card.json [--url2 URL] \
        --streaming on|off --scenario send --scenario ask ...

Scenarios: `send` (`hello`), `ask` (`ask:what colour?`, then the text `blue`), `ask-reply` (the same question
answered the ADK way: a function response to the call ADK made of it), `second-turn` (`hello`, then
`again`), `workflow` / `sequential` (`hello` to a `Workflow` / `SequentialAgent` of two remote agents,
`first` on --url and `second` on --url2).

Prints one JSON object per scenario: `{"scenario", "streaming", "ok", "error", "agents", "wire", "turns"}`.
`wire` is every HTTP request the agents' client made (JSON-RPC method, `A2A-Version`); each turn is
`{"sent", "events", "seconds", "question_at", "error"}`: `seconds` from the send to the turn's end,
`question_at` when the event asking the user arrived. Each event is what ADK yielded: author, partial,
final, texts, thoughts, function calls, error, and the A2A task id, context id and task state ADK recorded
in its `custom_metadata` (the state as v0.3 names it: `TASK_STATE_INPUT_REQUIRED` is `input-required`). A
turn that does not end within `--turn-timeout` seconds has `"error": "timeout: ..."`; the driver never
hangs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import traceback
import warnings
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from google.adk.a2a import _compat
from google.adk.agents import SequentialAgent
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import InMemoryRunner
from google.adk.workflow import Workflow
from google.genai import types

APP, USER = "interop", "user-1"
ASK_CALL = "mock_function_call_for_required_user_input"  # what ADK makes of an input-required question

TURNS: dict[str, list[str]] = {
    "send": ["hello"],
    "ask": ["ask:what colour?", "blue"],
    "ask-reply": ["ask:what colour?", "blue"],
    "second-turn": ["hello", "again"],
    "workflow": ["hello"],
    "sequential": ["hello"],
}


class Wire:
    """Every HTTP request the A2A client made: method, URL, JSON-RPC method, `A2A-Version` header."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def record(self, request: httpx.Request) -> None:
        call: dict[str, Any] = {"http": request.method, "url": str(request.url)}
        if request.method == "POST":
            try:
                call["method"] = json.loads(request.content).get("method")
            except ValueError:
                call["method"] = None
        call["version"] = request.headers.get("A2A-Version")
        self.calls.append(call)


def remote(name: str, url: str, streaming: bool, wire: Wire) -> RemoteA2aAgent:
    """A `RemoteA2aAgent` from the card URL, its client made by the user's `ClientFactory`."""
    client = httpx.AsyncClient(timeout=30, event_hooks={"request": [wire.record]})
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=client))
    return RemoteA2aAgent(name=name, agent_card=url, a2a_client_factory=factory)


def _state(name: Any) -> Any:
    """A task state as v0.3 names it (v1.0's `TASK_STATE_INPUT_REQUIRED` is `input-required`)."""
    if isinstance(name, str) and name.startswith("TASK_STATE_"):
        return name.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return name


def show(event: Any, started: float) -> dict[str, Any]:
    """What a user of the runner sees of one ADK event."""
    meta = event.custom_metadata or {}
    parts = event.content.parts if event.content and event.content.parts else []
    response, request = meta.get("a2a:response"), meta.get("a2a:request")
    status = response.get("status") if isinstance(response, dict) else None
    output = event.output
    return {
        "at": round(time.monotonic() - started, 3),
        "author": event.author,
        "partial": bool(event.partial),
        "final": event.is_final_response(),
        "texts": [p.text for p in parts if p.text and not p.thought],
        "thoughts": [p.text for p in parts if p.text and p.thought],
        "calls": [
            {"name": p.function_call.name, "args": p.function_call.args, "id": p.function_call.id}
            for p in parts
            if p.function_call
        ],
        "responses": [p.function_response.name for p in parts if p.function_response],
        "long_running": sorted(event.long_running_tool_ids or []),
        "output": output if output is None or isinstance(output, (str, int, float, bool)) else repr(output),
        "message_as_output": bool(event.node_info.message_as_output),
        "error": event.error_message,
        "task_id": meta.get("a2a:task_id"),
        "context_id": meta.get("a2a:context_id"),
        "state": _state(status.get("state")) if isinstance(status, dict) else None,
        "request": (
            {
                "task_id": request.get("taskId", request.get("task_id")),
                "context_id": request.get("contextId", request.get("context_id")),
            }
            if isinstance(request, dict)
            else None
        ),
    }


async def turn(runner: InMemoryRunner, session_id: str, part: types.Part, timeout_s: float) -> dict[str, Any]:
    """One user turn: the events ADK yields until the turn ends (or the timeout)."""
    sent = part.text if part.text is not None else {"function_response": part.function_response.response}
    out: dict[str, Any] = {"sent": sent, "events": [], "seconds": None, "question_at": None, "error": None}
    started = time.monotonic()

    async def consume() -> None:
        message = types.Content(role="user", parts=[part])
        async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
            shown = show(event, started)
            out["events"].append(shown)
            if out["question_at"] is None and any(c["name"] == ASK_CALL for c in shown["calls"]):
                out["question_at"] = shown["at"]

    try:
        await asyncio.wait_for(consume(), timeout_s)
    except TimeoutError:
        out["error"] = f"timeout: the turn did not end within {timeout_s} s"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def answer_part(scenario: str, text: str, previous: dict[str, Any] | None) -> types.Part:
    """The user's message: text, or (`ask-reply`'s answer) a function response to ADK's question call."""
    if scenario != "ask-reply" or previous is None:
        return types.Part(text=text)
    calls = [c for e in previous["events"] for c in e["calls"] if c["name"] == ASK_CALL]
    if not calls:
        raise RuntimeError(f"no {ASK_CALL} call to answer in the previous turn")
    return types.Part(
        function_response=types.FunctionResponse(id=calls[-1]["id"], name=ASK_CALL, response={"result": text})
    )


async def run(args: argparse.Namespace, scenario: str) -> dict[str, Any]:
    streaming = args.streaming == "on"
    wire = Wire()
    result: dict[str, Any] = {
        "scenario": scenario,
        "streaming": streaming,
        "ok": False,
        "error": None,
        "agents": {},
        "wire": wire.calls,
        "turns": [],
    }
    if scenario in ("workflow", "sequential"):
        first = remote("first", args.url, streaming, wire)
        second = remote("second", args.url2 or args.url, streaming, wire)
        agents = [first, second]
        if scenario == "workflow":
            pipeline = Workflow(name="pipeline", edges=[("START", first, second)])
            runner = InMemoryRunner(node=pipeline, app_name=APP)
        else:
            with warnings.catch_warnings():  # deprecated in favour of Workflow, still what many apps use
                warnings.simplefilter("ignore", DeprecationWarning)
                runner = InMemoryRunner(
                    agent=SequentialAgent(name="pipeline", sub_agents=agents), app_name=APP
                )
    else:
        agents = [remote("scripted", args.url, streaming, wire)]
        runner = InMemoryRunner(agent=agents[0], app_name=APP)
    try:
        session = await runner.session_service.create_session(app_name=APP, user_id=USER)
        for text in TURNS[scenario]:
            previous = result["turns"][-1] if result["turns"] else None
            part = answer_part(scenario, text, previous)
            result["turns"].append(await turn(runner, session.id, part, args.turn_timeout))
        result["ok"] = True
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
    finally:
        for agent in agents:
            card = agent._agent_card  # what ADK resolved and validated from the URL
            result["agents"][agent.name] = {
                "description": agent.description,
                "card_name": getattr(card, "name", None),
                "card_urls": _compat.agent_card_rpc_urls(card) if card is not None else [],
            }
            await agent.cleanup()
            factory = agent._a2a_client_factory
            if factory is not None and factory._config.httpx_client is not None:
                await factory._config.httpx_client.aclose()
        await runner.close()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="the agent card's URL")
    parser.add_argument("--url2", help="the second workflow agent's card URL (default: --url)")
    parser.add_argument("--streaming", choices=("on", "off"), required=True)
    parser.add_argument("--scenario", action="append", required=True, choices=sorted(TURNS))
    parser.add_argument("--turn-timeout", type=float, default=30.0)
    args = parser.parse_args()
    for scenario in args.scenario:
        print(json.dumps(await run(args, scenario), default=repr), flush=True)


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # ADK's experimental-API warnings go to stderr, never into the JSON
    asyncio.run(main())
