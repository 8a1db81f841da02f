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

from typing import Any

# First (it sorts first): importing it sends whatever the frameworks print to stderr.
from _a2a03 import WIRE, bounded, describe, main, timed_turn
from beeai_framework.adapters.a2a.agents import A2AAgent, A2AAgentUpdateEvent
from beeai_framework.emitter import EventMeta
from beeai_framework.memory import UnconstrainedMemory


def agent(url: str) -> A2AAgent:
    return A2AAgent(url=url, memory=UnconstrainedMemory())


async def turn(remote: A2AAgent, text: str, mode: str) -> dict[str, Any]:
    """One `run` of the agent, with a handler on its `update` events."""
    events: list[dict[str, Any]] = []

    def on_update(data: A2AAgentUpdateEvent, meta: EventMeta) -> None:
        events.append(describe(data.value))

    async def run() -> Any:
        return await remote.run(text, streaming=mode == "streaming").on("update", on_update)

    out, response = await timed_turn(text, run(), events)
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


if __name__ == "__main__":
    main(SCENARIOS)
