"""Drive AWS Strands' remote A2A agent (`strands.agent.a2a_agent.A2AAgent`, strands-agents 1.62.0) against a
server, with no model: the remote agent is the agent that runs (or a `Graph` of two of them).

Run in the a2a03 venv (tests/support/frameworks/__init__.py `run_driver`):

    strands_driver.py --url http://127.0.0.1:PORT [--mode streaming|blocking ...] [--scenario NAME ...]

Modes: `streaming` is the agent as its docs build it, `A2AAgent(endpoint=url)`: `invoke_async` and
`stream_async` both send `message/stream` (the agent forces `streaming=True` on its client config).
`blocking` gives it a non-streaming client factory (`a2a_client_factory=ClientFactory(ClientConfig(
streaming=False))`, the only way Strands sends `message/send`). Scenarios: `card`, `echo`, `ask` (a question,
then the answer as the next call), `second-turn` (two calls on one agent), `graph` (a two-node `Graph`).

Prints one JSON object per line on stdout, per (mode, scenario): what the framework showed (result text, stop
reason, the task state it reports, the A2A events it yielded) and what it put on the wire. Anything else
written to stdout goes to stderr. Every framework call is bounded (`TURN_TIMEOUT_S`): a hang is a JSON
error line, never a stuck test.
"""

from __future__ import annotations

from typing import Any

# First (it sorts first): importing it sends whatever the frameworks print to stderr.
from _a2a03 import WIRE, bounded, describe, main, timed_turn
from a2a.client import ClientConfig, ClientFactory
from strands.agent.a2a_agent import A2AAgent
from strands.multiagent import GraphBuilder


def agent(url: str, mode: str, name: str | None = None) -> A2AAgent:
    """The remote agent as a user builds it for this mode."""
    if mode == "blocking":
        return A2AAgent(
            endpoint=url, name=name, a2a_client_factory=ClientFactory(ClientConfig(streaming=False))
        )
    return A2AAgent(endpoint=url, name=name)


async def turn(remote: A2AAgent, text: str, *, call: str = "stream_async") -> dict[str, Any]:
    """One call to its `AgentResult`: `invoke_async` (the result only) or `stream_async` (the A2A events it
    yields, then the result; `invoke_async` is this loop keeping only the result)."""
    events: list[dict[str, Any]] = []
    result: Any = None

    async def consume() -> None:
        nonlocal result
        if call == "invoke_async":
            result = await remote.invoke_async(text)
            return
        async for ev in remote.stream_async(text):
            if ev.get("type") == "a2a_stream":
                events.append(describe(ev["event"]))
            elif "result" in ev:
                result = ev["result"]

    out, _ = await timed_turn(text, consume(), events, call=call)
    if result is not None:
        out["text"] = "".join(block.get("text", "") for block in result.message["content"])
        out["shown"] = str(result)
        out["stop_reason"] = result.stop_reason
        out["state"] = result.state.get("a2a_task_state")
    return out


# ---- scenarios --------------------------------------------------------------------------------------------


async def card(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url, mode)
    wire_from = len(WIRE)
    found = await bounded(remote.get_agent_card())
    return {
        "agent_name": remote.name,
        "agent_description": remote.description,
        "card_name": found.name,
        "card_url": found.url,
        "preferred_transport": found.preferred_transport,
        "protocol_version": found.protocol_version,
        "streaming": found.capabilities.streaming,
        "fetched": [w["url"] for w in WIRE[wire_from:]],
    }


async def echo(url: str, mode: str) -> dict[str, Any]:
    """The call of the docs' first example, then the same through `stream_async`."""
    remote = agent(url, mode)
    return {
        "turns": [
            await turn(remote, f"hello from strands {mode}", call="invoke_async"),
            await turn(remote, f"streamed hello from strands {mode}"),
        ]
    }


async def ask(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url, mode)
    question = await turn(remote, "ask:what colour?")
    answer = await turn(remote, f"blue {mode}")
    return {"turns": [question, answer]}


async def second_turn(url: str, mode: str) -> dict[str, Any]:
    remote = agent(url, mode)
    return {"turns": [await turn(remote, f"first {mode}"), await turn(remote, f"second {mode}")]}


async def graph(url: str, mode: str) -> dict[str, Any]:
    builder = GraphBuilder()
    builder.add_node(agent(url, mode, "first"), "first")
    builder.add_node(agent(url, mode, "second"), "second")
    builder.add_edge("first", "second")
    builder.set_entry_point("first")
    wire_from = len(WIRE)
    result = await bounded(builder.build().invoke_async("hello graph"))
    nodes = {}
    for node_id, node_result in result.results.items():
        shown = node_result.result
        nodes[node_id] = {
            "status": node_result.status.value,
            "text": "".join(b.get("text", "") for b in shown.message["content"]),
            "stop_reason": shown.stop_reason,
        }
    return {
        "status": result.status.value,
        "order": [n.node_id for n in result.execution_order],
        "nodes": nodes,
        "wire": [w for w in WIRE[wire_from:] if w["http"] == "POST"],
    }


SCENARIOS = {"card": card, "echo": echo, "ask": ask, "second-turn": second_turn, "graph": graph}


if __name__ == "__main__":
    main(SCENARIOS)
