"""A fake of the OpenAI Responses API (`POST /v1/responses`, streamed) for the real Codex CLI.

Codex reaches it through a custom provider (see `codex_config`); the built-in provider ignores
OPENAI_BASE_URL and tries a WebSocket on the real host. Run alone:
`python -m tests.support.fakes.openai_fake`.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import (
    ERROR_MESSAGE,
    TEXT_CHUNKS,
    FakeServer,
    Reply,
    Scenario,
    call_final_text,
    call_script,
    final_text,
    next_call,
    offered_tool,
    scenario_of,
)

API_KEY_ENV = "FAKE_OPENAI_KEY"


def codex_config(base_url: str, model: str = "gpt-fake") -> str:
    """config.toml for a fresh CODEX_HOME that points Codex at the fake, with no retries."""
    return (
        f'model = "{model}"\n'
        'model_provider = "fake"\n'
        "[model_providers.fake]\n"
        'name = "fake"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{API_KEY_ENV}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


def write_codex_home(home: Path, base_url: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(codex_config(base_url))
    return home


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    return [c.get("text", "") for c in content or () if isinstance(c, dict)]


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(c.get("text", "") for c in output if isinstance(c, dict))
    return json.dumps(output)


def tool_names(tools: Any, namespace: str = "") -> dict[str, tuple[str, str]]:
    """Every function a request offers, by qualified name (`mcp__a2a__send_to_agent` for `send_to_agent` in
    Codex's namespace `mcp__a2a`, where it puts an MCP server's tools): (its namespace or "", its name)."""
    out: dict[str, tuple[str, str]] = {}
    for t in tools or ():
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        if t.get("type") == "namespace":
            out |= tool_names(t.get("tools"), t["name"])
        else:
            out[f"{namespace}__{t['name']}" if namespace else t["name"]] = (namespace, t["name"])
    return out


def plan(body: dict[str, Any]) -> tuple[str, Any]:
    """("final", tool output) | ("tool", Scenario) | ("mcp", (namespace, name, arguments)) | ("said", text) |
    ("error" | "hang" | "text", None) for one request."""
    items = [i for i in body.get("input") or () if isinstance(i, dict)]
    users = [n for n, i in enumerate(items) if i.get("role") == "user"]
    last_user = users[-1] if users else -1
    outputs = [i for i in items[last_user + 1 :] if i.get("type") == "function_call_output"]
    if calls := call_script(_texts(items[last_user]) if users else []):
        said = [_output_text(o.get("output")) for o in outputs]
        step = next_call(calls, said)
        if step is None:
            return "said", call_final_text(said[-1] if said else "")
        offered = tool_names(body.get("tools"))
        name = offered_tool(list(offered), step[0])
        if name is None:
            return "said", f"No tool a2a {step[0]} is offered"
        return "mcp", (*offered[name], step[1])
    scenario = scenario_of(_texts(items[last_user]) if users else [])
    if scenario.kind == "loop" and body.get("tools"):
        return "tool", replace(scenario, step=len(outputs) + 1)
    if scenario.kind == "twice" and body.get("tools") and len(outputs) < 2:
        return "tool", scenario
    if outputs:
        return "final", _output_text(outputs[-1].get("output"))
    if scenario.kind in ("error", "hang"):
        return scenario.kind, None
    if scenario.kind != "text" and body.get("tools"):
        return "tool", scenario
    return "text", None


class OpenAIFake(FakeServer):
    """Answers `/v1/responses` as SSE; every other path 404s."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        super().__init__()

    def reply(self, method: str, path: str, body: Any) -> Reply:
        if method != "POST" or not path.split("?")[0].endswith("/responses") or not isinstance(body, dict):
            return Reply(404, {"error": {"message": f"fake: no {method} {path}"}})
        kind, arg = plan(body)
        n = next(self._ids)
        if kind == "error":
            return Reply(400, {"error": {"message": ERROR_MESSAGE, "type": "invalid_request_error"}})
        if kind == "hang":
            return Reply(hang=True)
        if kind == "tool":
            return self._stream(n, self._function_call(n, arg))
        if kind == "mcp":
            namespace, name, args = arg
            return self._stream(n, self._named_call(n, name, args, namespace))
        text = final_text(arg) if kind == "final" else arg if kind == "said" else None
        return self._stream(n, self._message(n, text))

    def _message(self, n: int, text: str | None) -> list[dict[str, Any]]:
        chunks = [text] if text is not None else list(TEXT_CHUNKS)
        msg_id = f"msg_{n}"
        added = {"type": "message", "id": msg_id, "role": "assistant", "status": "in_progress", "content": []}
        done = {
            **added,
            "status": "completed",
            "content": [{"type": "output_text", "text": "".join(chunks), "annotations": []}],
        }
        events: list[dict[str, Any]] = [
            {"type": "response.output_item.added", "output_index": 0, "item": added}
        ]
        for chunk in chunks:
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": msg_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": chunk,
                }
            )
        events.append({"type": "response.output_item.done", "output_index": 0, "item": done})
        return events

    @staticmethod
    def _function_call(n: int, scenario: Scenario) -> list[dict[str, Any]]:
        args = {"cmd": scenario.command(), "yield_time_ms": 30000}
        return OpenAIFake._named_call(n, "exec_command", args)

    @staticmethod
    def _named_call(n: int, name: str, args: dict[str, Any], namespace: str = "") -> list[dict[str, Any]]:
        item = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        if namespace:
            item["namespace"] = namespace
        return [
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]

    @staticmethod
    def _stream(n: int, output: list[dict[str, Any]]) -> Reply:
        """`output` events framed by response.created and response.completed (with usage)."""
        resp = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
        }
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        events = [
            {"type": "response.created", "response": resp},
            *output,
            {"type": "response.completed", "response": {**resp, "status": "completed", "usage": usage}},
        ]
        return Reply(events=events, sse_event_names=True)


if __name__ == "__main__":
    fake = OpenAIFake()
    print(fake.url, flush=True)
    fake.join()
