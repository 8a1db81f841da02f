"""Cursor's CLI behind the agent API: `cursor-agent -p --output-format stream-json`, prompt as argument.

Cursor has no approval channel in stream-json, so it runs unattended (`--force`) when AGENT_FORCE is true;
with AGENT_FORCE=false the flag is left out and the CLI refuses whatever would need a permission.

| Cursor stream-json line              | AgentEvent                                    |
|--------------------------------------|-----------------------------------------------|
| `system`/`init`                      | init(model, session_id); session remembered   |
| `assistant` text                     | thinking(text)                                |
| `tool_call`/`started`                | tool_use(kind, args), e.g. `shell` {command}  |
| `tool_call`/`completed`              | tool_result(output or error)                  |
| `result` success / error             | done(result, stats) / error(result text)      |

`thinking` lines (the model's private reasoning) are not part of the answer and are skipped.

Usage: the stream-json documentation shows no token counts in `result`, so a run reports its wall time and
tool calls only; a `usage` object on `result` (`inputTokens`/`input_tokens`, `outputTokens`,
`cacheReadTokens`, `cacheWriteTokens`) is taken for the model `init` named, should Cursor print one.
"""

from __future__ import annotations

import json
from typing import Any

from app.protocol.usage import ModelUsage, Usage

from ..events import AgentEvent, count
from ..sdk import Request
from .run import CliAgent, CliRun


def _tool(call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(`shell`, the call's body) from `{"shellToolCall": {...}}`."""
    for key, body in call.items():
        name = key[: -len("ToolCall")] if key.endswith("ToolCall") else key
        return name, body if isinstance(body, dict) else {}
    return "tool", {}


def _output(result: Any) -> str:
    if not isinstance(result, dict):
        return "" if result is None else str(result)
    if "success" in result:
        ok = result["success"]
        if isinstance(ok, dict):
            for key in ("stdout", "content", "output"):
                if isinstance(ok.get(key), str):
                    return ok[key]
        return json.dumps(ok, ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False)


def cursor_usage(result: dict[str, Any], model: str | None) -> Usage:
    """What a `result` line says the run used: tokens only if it carries a `usage` object."""
    u = result.get("usage")
    if not isinstance(u, dict):
        return Usage()

    def get(*names: str) -> int:
        return count(next((u[n] for n in names if n in u), 0))

    one = ModelUsage(
        model or "",
        input_tokens=get("inputTokens", "input_tokens"),
        output_tokens=get("outputTokens", "output_tokens"),
        cache_read_tokens=get("cacheReadTokens", "cache_read_tokens", "cache_read_input_tokens"),
        cache_write_tokens=get("cacheWriteTokens", "cache_write_tokens", "cache_creation_input_tokens"),
    )
    return Usage((one,))


class CursorRun(CliRun):
    takes_tools = False
    """cursor-agent reads MCP servers only from its configuration files, not per run."""

    def __init__(self, request: Request, agent: CursorAgent) -> None:
        super().__init__(request, agent)
        self._started = False
        self._model: str | None = None

    def command(self) -> list[str]:
        o = self.options
        argv = [self.agent.binary, "-p", "--output-format", "stream-json"]
        if self.unattended:
            argv.append("--force")
        if o.model:
            argv += ["--model", o.model]
        if session := self.session_id():
            argv += ["--resume", session]
        return [*argv, self.prompt()]

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind, sub = obj.get("type"), obj.get("subtype")
        if kind == "system" and sub == "init" and not self._started:
            self._started = True
            self.remember_session(obj.get("session_id"))
            self._model = obj.get("model") if isinstance(obj.get("model"), str) else None
            return [AgentEvent.init(model=obj.get("model"), session_id=obj.get("session_id"))]
        if kind == "assistant":
            content = (obj.get("message") or {}).get("content") or []
            return [
                AgentEvent.thinking(b["text"])
                for b in content
                if isinstance(b, dict) and b.get("type") == "text" and b.get("text")
            ]
        if kind == "tool_call":
            name, body = _tool(obj.get("tool_call") or {})
            if sub == "started":
                return [AgentEvent.tool_use(name, body.get("args"))]
            if sub == "completed":
                return [AgentEvent.tool_result(_output(body.get("result")), name)]
        if kind == "result":
            self.remember_session(obj.get("session_id"))
            usage = cursor_usage(obj, self._model)
            if obj.get("is_error") or sub != "success":
                reason = str(obj.get("result") or f"cursor-agent ended with {sub}")
                return [AgentEvent.error(reason, usage=usage)]
            stats = {"duration_ms": obj.get("duration_ms")}
            return [AgentEvent.done(summary=obj.get("result"), stats=stats, usage=usage)]
        return []


class CursorAgent(CliAgent):
    adapter = "cursor"
    bin_field = "cursor_bin"
    description = "Cursor's agent CLI (`cursor-agent`) working in a workspace per conversation."
    run_class = CursorRun
