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
"""

from __future__ import annotations

import json
from typing import Any

from .cli_run import CODING_SKILL, CliAgent, CliRun
from .events import AgentEvent
from .sdk import Request


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


class CursorRun(CliRun):
    def __init__(self, request: Request, agent: CursorAgent) -> None:
        super().__init__(request, agent)
        self._started = False

    def command(self) -> list[str]:
        o = self.options
        argv = [self.agent.binary, "-p", "--output-format", "stream-json"]
        if o.force:
            argv.append("--force")
        if o.model:
            argv += ["--model", o.model]
        if session := self.session_id():
            argv += ["--resume", session]
        return [*argv, self.request.message.text()]

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind, sub = obj.get("type"), obj.get("subtype")
        if kind == "system" and sub == "init" and not self._started:
            self._started = True
            self.remember_session(obj.get("session_id"))
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
            if obj.get("is_error") or sub != "success":
                return [AgentEvent.error(str(obj.get("result") or f"cursor-agent ended with {sub}"))]
            return [AgentEvent.done(summary=obj.get("result"), stats={"duration_ms": obj.get("duration_ms")})]
        return []


class CursorAgent(CliAgent):
    adapter = "cursor"
    bin_field = "cursor_bin"
    description = "Cursor's agent CLI (`cursor-agent`) working in a workspace per conversation."
    skills = (CODING_SKILL,)
    run_class = CursorRun
