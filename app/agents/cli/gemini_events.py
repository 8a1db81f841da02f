"""Gemini CLI output → AgentEvents, without any process: `gemini -p --output-format stream-json` lines and
the `session/update` notifications of `gemini --acp` (Agent Client Protocol). Kept apart from the adapter so
each printed shape is unit-tested on its own.

Usage: the headless `result` line's `stats` (this invocation's tokens, per model under `models`: `input`
uncached, `cached`, `output_tokens`) and ACP's `session/prompt` answer (`_meta.quota`: `token_count` and
`model_usage`); Gemini reports no cost (`gemini_usage`, `acp_usage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.protocol.usage import ModelUsage, Usage

from ..events import AgentEvent, as_text, count


def _gemini_model(name: str, u: dict[str, Any]) -> ModelUsage:
    """One model of headless `stats`: `input_tokens` counts the cached ones (`cached`), `input` not."""
    cached = count(u.get("cached"))
    uncached = u.get("input") if "input" in u else count(u.get("input_tokens")) - cached
    return ModelUsage(
        name,
        input_tokens=count(uncached),
        output_tokens=count(u.get("output_tokens")),
        cache_read_tokens=cached,
    )


def gemini_usage(stats: Any, model: str | None) -> Usage | None:
    """What headless Gemini's `result` stats say the run used: per model when it names them, else the
    totals for `model` (the one `init` named)."""
    if not isinstance(stats, dict):
        return None
    models = stats.get("models")
    if isinstance(models, dict) and models:
        found = tuple(_gemini_model(str(n), u) for n, u in models.items() if isinstance(u, dict))
    else:
        found = (_gemini_model(model or "", stats),)
    return Usage(found)


def acp_usage(quota: Any, model: str | None) -> Usage | None:
    """What `gemini --acp` says a prompt used (`_meta.quota`): `model_usage` per model, else `token_count`
    for `model`."""
    if not isinstance(quota, dict):
        return None

    def one(name: str, tokens: Any) -> ModelUsage:
        t = tokens if isinstance(tokens, dict) else {}
        cached = count(t.get("cached_input_tokens", t.get("cached")))
        return ModelUsage(
            name,
            input_tokens=max(0, count(t.get("input_tokens")) - cached),
            output_tokens=count(t.get("output_tokens")),
            cache_read_tokens=cached,
        )

    per_model = quota.get("model_usage")
    if isinstance(per_model, list) and per_model:
        return Usage(
            tuple(
                one(str(m.get("model") or ""), m.get("token_count")) for m in per_model if isinstance(m, dict)
            )
        )
    if "token_count" in quota:
        return Usage((one(model or "", quota["token_count"]),))
    return None


@dataclass(slots=True)
class StreamJsonParser:
    """`gemini -p --output-format stream-json`: init, message (deltas), tool_use/tool_result, result."""

    session_id: str | None = None
    last_error: str | None = None
    model: str | None = None
    _text: list[str] = field(default_factory=list)
    _tools: dict[str, str] = field(default_factory=dict)

    def feed(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj.get("type")
        if kind == "init":
            self.session_id = obj.get("session_id") or self.session_id
            self.model = as_text(obj.get("model")) or self.model
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
            usage = gemini_usage(obj.get("stats"), self.model)
            if obj.get("status") == "success":
                summary = "".join(self._text) or None
                return [AgentEvent.done(summary=summary, stats=obj.get("stats") or None, usage=usage)]
            err = obj.get("error")
            message = as_text(err.get("message")) if isinstance(err, dict) else as_text(err)
            reason = f"gemini: {message or self.last_error or obj.get('status')}"
            return [AgentEvent.error(reason, usage=usage)]
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
