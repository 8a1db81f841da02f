"""Gemini CLI output → AgentEvents, without any process: `gemini -p --output-format stream-json` lines and
the `session/update` notifications of `gemini --acp` (Agent Client Protocol). Kept apart from the adapter so
each printed shape is unit-tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .events import AgentEvent, as_text


@dataclass(slots=True)
class StreamJsonParser:
    """`gemini -p --output-format stream-json`: init, message (deltas), tool_use/tool_result, result."""

    session_id: str | None = None
    last_error: str | None = None
    _text: list[str] = field(default_factory=list)
    _tools: dict[str, str] = field(default_factory=dict)

    def feed(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj.get("type")
        if kind == "init":
            self.session_id = obj.get("session_id") or self.session_id
            return [AgentEvent.init(model=obj.get("model"), session_id=self.session_id)]
        if kind == "message" and obj.get("role") == "assistant":
            text = as_text(obj.get("content"))
            self._text.append(text)
            return [AgentEvent.thinking(text)] if text else []
        if kind == "tool_use":
            name = str(obj.get("tool_name") or "tool")
            self._tools[str(obj.get("tool_id"))] = name
            return [AgentEvent.tool_use(name, obj.get("parameters"))]
        if kind == "tool_result":
            name = self._tools.pop(str(obj.get("tool_id")), None)
            err = obj.get("error")
            if obj.get("status") == "error" or err:
                message = as_text(err.get("message")) if isinstance(err, dict) else as_text(err)
                return [AgentEvent.tool_result(f"error: {message or 'the tool failed'}", name)]
            return [AgentEvent.tool_result(as_text(obj.get("output")) or "done", name)]
        if kind == "error":
            # Warnings ("Loop detected") and errors alike: the `result` line or the exit decides.
            self.last_error = as_text(obj.get("message")) or self.last_error
            return []
        if kind == "result":
            if obj.get("status") == "success":
                summary = "".join(self._text) or None
                return [AgentEvent.done(summary=summary, stats=obj.get("stats") or None)]
            err = obj.get("error")
            message = as_text(err.get("message")) if isinstance(err, dict) else as_text(err)
            return [AgentEvent.error(f"gemini: {message or self.last_error or obj.get('status')}")]
        return []


def _content_text(content: Any) -> str:
    """Text of an ACP tool call's content list (`content` blocks; diffs by path)."""
    out: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "content" and isinstance(block.get("content"), dict):
            out.append(as_text(block["content"].get("text")))
        elif block.get("type") == "diff":
            out.append(f"edited {block.get('path')}")
    return "\n".join(t for t in out if t)


@dataclass(slots=True)
class AcpParser:
    """`session/update` notifications of `gemini --acp`; requests and responses are the adapter's."""

    _text: list[str] = field(default_factory=list)
    _tools: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str | None:
        return "".join(self._text) or None

    def feed(self, update: dict[str, Any]) -> list[AgentEvent]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            text = as_text(content.get("text")) if isinstance(content, dict) else ""
            self._text.append(text)
            return [AgentEvent.thinking(text)] if text else []
        if kind == "tool_call":
            return [self.tool_use(update)]
        if kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
            call_id = str(update.get("toolCallId"))
            name = self._tools.pop(call_id, None)
            text = _content_text(update.get("content")) or str(update.get("status"))
            if update.get("status") == "failed":
                text = f"error: {text}"
            return [AgentEvent.tool_result(text, name)]
        return []

    def known(self, call: dict[str, Any]) -> bool:
        """Whether a `tool_call` update already announced this call."""
        return str(call.get("toolCallId")) in self._tools

    def tool_use(self, call: dict[str, Any]) -> AgentEvent:
        """A tool call (also the one a permission request is about), remembered for its result."""
        name = str(call.get("kind") or "tool")
        self._tools[str(call.get("toolCallId"))] = name
        tool_input = call.get("rawInput") or {"title": call.get("title")}
        return AgentEvent.tool_use(name, tool_input)
