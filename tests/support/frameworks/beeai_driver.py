"""Drive BeeAI Framework's remote A2A agent (`beeai_framework.adapters.a2a.agents.A2AAgent`, beeai-framework
0.1.85) against a server, with no model: the remote agent is the agent that runs.

Run in the a2a03 venv (tests/support/frameworks/__init__.py `run_driver`):

    beeai_driver.py --url http://127.0.0.1:PORT [--mode streaming|blocking ...] [--scenario NAME ...]

The agent is built as BeeAI's A2A page shows, `A2AAgent(url=url, memory=UnconstrainedMemory())`, and each
turn is `await agent.run(text, streaming=...).on("update", handler)` (`streaming` is one of the run's
`A2AAgentOptions`; without it the agent streams when the card says it can). Modes: `streaming` sends
`message/stream`, `blocking` sends `message/send`. Scenarios: `card`, `echo`, `ask` (a question, then the
answer as the next run of the same agent), `second-turn` (two runs of one agent).

Prints one JSON object per line on stdout, per (mode, scenario): what the framework showed (the run's last
message, the A2A events its `update` handler got) and what it put on the wire. Anything else written to
stdout (BeeAI's logger writes there) goes to stderr. Every run is bounded (`TURN_TIMEOUT_S`): a hang is a
JSON error line, never a stuck test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable
from typing import Any

TURN_TIMEOUT_S = 30

# JSON lines go to the real stdout; whatever else prints (BeeAI's logger, warnings) goes to stderr.
_OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import httpx  # noqa: E402
from a2a.types import Message, TaskArtifactUpdateEvent, TaskStatusUpdateEvent  # noqa: E402
from beeai_framework.adapters.a2a.agents import A2AAgent, A2AAgentUpdateEvent  # noqa: E402
from beeai_framework.emitter import EventMeta  # noqa: E402
from beeai_framework.memory import UnconstrainedMemory  # noqa: E402


def emit(**fields: Any) -> None:
    _OUT.write(json.dumps(fields, default=str) + "\n")


# ---- the wire: every request the framework's httpx clients send -----------------------------------------

WIRE: list[dict[str, Any]] = []
_send = httpx.AsyncClient.send


async def _recording_send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
    entry: dict[str, Any] = {"http": request.method, "url": str(request.url)}
    if request.method == "POST":
        try:
            body = json.loads(request.content)
        except ValueError:
            body = {}
        entry["rpc"] = body.get("method")
        msg = (body.get("params") or {}).get("message") or {}
        entry["task_id"] = msg.get("taskId")
        entry["context_id"] = msg.get("contextId")
        entry["reference_task_ids"] = msg.get("referenceTaskIds")
    WIRE.append(entry)
    return await _send(self, request, **kwargs)


httpx.AsyncClient.send = _recording_send  # type: ignore[method-assign]


# ---- what the framework showed ----------------------------------------------------------------------------


def text_of(parts: Any) -> str:
    return "".join(getattr(p.root, "text", "") for p in parts or [])


def describe(value: Any) -> dict[str, Any]:
    """One A2A event as BeeAI's `update` event carries it (`A2AAgentUpdateEvent.value`)."""
    if isinstance(value, Message):
        return {"kind": "message", "text": text_of(value.parts), "task_id": value.task_id}
    task, update = value
    out: dict[str, Any] = {"task_id": task.id, "context_id": task.context_id}
    if update is None:
        out.update(kind="task", state=task.status.state.value)
    elif isinstance(update, TaskStatusUpdateEvent):
        out.update(kind="status-update", state=update.status.state.value, final=update.final)
        if update.status.message:
            out["text"] = text_of(update.status.message.parts)
    elif isinstance(update, TaskArtifactUpdateEvent):
        out.update(
            kind="artifact-update",
            name=update.artifact.name,
            text=text_of(update.artifact.parts),
            append=update.append,
            last_chunk=update.last_chunk,
        )
    return out


def agent(url: str) -> A2AAgent:
    return A2AAgent(url=url, memory=UnconstrainedMemory())


async def bounded(what: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(what, TURN_TIMEOUT_S)


async def turn(remote: A2AAgent, text: str, mode: str) -> dict[str, Any]:
    """One `run` of the agent, with a handler on its `update` events."""
    events: list[dict[str, Any]] = []

    def on_update(data: A2AAgentUpdateEvent, meta: EventMeta) -> None:
        events.append(describe(data.value))

    async def run() -> Any:
        return await remote.run(text, streaming=mode == "streaming").on("update", on_update)

    wire_from = len(WIRE)
    started = time.monotonic()
    out: dict[str, Any] = {"sent": text}
    response = None
    try:
        response = await bounded(run())
    except TimeoutError:
        out["error"] = f"timeout: the run did not end within {TURN_TIMEOUT_S} s"
    except Exception as exc:  # what the framework raised is what the user saw
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - started, 3)
    out["events"] = events
    out["wire"] = [w for w in WIRE[wire_from:] if w["http"] == "POST"]
    out["task_ids"] = sorted({e["task_id"] for e in events if e.get("task_id")})
    out["context_ids"] = sorted({e["context_id"] for e in events if e.get("context_id")})
    if response is not None:
        out["text"] = response.last_message.text
        out["outputs"] = [m.text for m in response.output]
        last = response.event
        out["state"] = last[0].status.state.value if isinstance(last, tuple) else None
    out["memory"] = [f"{m.role}: {m.text}" for m in remote.memory.messages]
    return out


# ---- scenarios --------------------------------------------------------------------------------------------


async def card(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url)
    wire_from = len(WIRE)
    await bounded(remote.check_agent_exists())
    found = remote.agent_card
    assert found is not None
    return {
        "agent_name": remote.name,
        "agent_description": remote.meta.description,
        "card_name": found.name,
        "card_url": found.url,
        "preferred_transport": found.preferred_transport,
        "protocol_version": found.protocol_version,
        "streaming": found.capabilities.streaming,
        "fetched": [w["url"] for w in WIRE[wire_from:]],
    }


async def echo(url: str, mode: str) -> dict[str, Any]:
    return {"turns": [await turn(agent(url), f"hello from beeai {mode}", mode)]}


async def ask(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url)
    question = await turn(remote, "ask:what colour?", mode)
    answer = await turn(remote, f"blue {mode}", mode)
    return {"turns": [question, answer]}


async def second_turn(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url)
    return {"turns": [await turn(remote, f"first {mode}", mode), await turn(remote, f"second {mode}", mode)]}


SCENARIOS = {"card": card, "echo": echo, "ask": ask, "second-turn": second_turn}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", action="append", choices=["streaming", "blocking"])
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    args = parser.parse_args()
    for mode in args.mode or ["streaming", "blocking"]:
        for name in args.scenario or list(SCENARIOS):
            try:
                emit(mode=mode, scenario=name, **await SCENARIOS[name](args.url, mode))
            except TimeoutError:
                emit(mode=mode, scenario=name, error=f"timeout: no answer within {TURN_TIMEOUT_S} s")
            except Exception as exc:
                emit(
                    mode=mode,
                    scenario=name,
                    error=f"{type(exc).__name__}: {exc}",
                    trace=traceback.format_exc(),
                )


if __name__ == "__main__":
    asyncio.run(main())
