"""Codex output → AgentEvents, without any process: `codex exec --json` lines and `codex app-server`
notifications. Kept apart from the adapter so each printed shape is unit-tested on its own.

Both parsers keep a little state (the thread id, the last assistant text, usage) because Codex spreads
what one AgentEvent needs over several lines: the `done` summary is the last agent message, and usage
arrives before `turn/completed` in the app-server protocol.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .events import AgentEvent, as_text

log = logging.getLogger(__name__)

SHELL = "shell"
FILE_CHANGE = "file_change"
_ASSISTANT = {"agent_message", "assistant_message", "agentMessage"}


def _item_type(item: dict[str, Any]) -> str:
    """`type` today; `item_type` in the shape Codex announced first (Sept 2025)."""
    return str(item.get("type") or item.get("item_type") or "")


def _tool_use(kind: str, item: dict[str, Any]) -> AgentEvent | None:
    if kind in ("command_execution", "commandExecution"):
        return AgentEvent.tool_use(SHELL, {"command": item.get("command")})
    if kind in ("file_change", "fileChange"):
        return AgentEvent.tool_use(FILE_CHANGE, {"changes": item.get("changes")})
    if kind in ("mcp_tool_call", "mcpToolCall"):
        name = f"{item.get('server')}.{item.get('tool')}"
        return AgentEvent.tool_use(name, item.get("arguments"))
    if kind in ("web_search", "webSearch"):
        return AgentEvent.tool_use("web_search", {"query": item.get("query")})
    return None


def _tool_result(kind: str, item: dict[str, Any]) -> AgentEvent | None:
    status = str(item.get("status") or "")
    if kind in ("command_execution", "commandExecution"):
        output = item.get("aggregated_output") or item.get("aggregatedOutput") or ""
        code = item.get("exit_code", item.get("exitCode"))
        if status == "declined":
            return AgentEvent.tool_result("declined by the user", SHELL)
        text = output.strip() or (f"exit code {code}" if code is not None else status)
        return AgentEvent.tool_result(text, SHELL)
    if kind in ("file_change", "fileChange"):
        paths = [c.get("path", "?") for c in item.get("changes") or () if isinstance(c, dict)]
        return AgentEvent.tool_result(f"{status}: {', '.join(paths)}".strip(": "), FILE_CHANGE)
    if kind in ("mcp_tool_call", "mcpToolCall"):
        err = item.get("error")
        text = (err.get("message") if isinstance(err, dict) else err) or status
        return AgentEvent.tool_result(str(text), f"{item.get('server')}.{item.get('tool')}")
    if kind in ("web_search", "webSearch"):
        return AgentEvent.tool_result(status or "searched", "web_search")
    return None


@dataclass(slots=True)
class ExecParser:
    """`codex exec --json`: one event per line, whole items only (no text deltas)."""

    model: str | None = None
    thread_id: str | None = None
    last_message: str | None = None
    last_error: str | None = None
    _started: set[str] = field(default_factory=set)

    def feed(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj.get("type")
        if kind == "thread.started":
            self.thread_id = obj.get("thread_id") or self.thread_id
            return [AgentEvent.init(model=self.model, session_id=self.thread_id)]
        if kind in ("item.started", "item.completed") and isinstance(obj.get("item"), dict):
            return self._item(obj["item"], completed=kind == "item.completed")
        if kind == "turn.completed":
            return [AgentEvent.done(summary=self.last_message, stats=obj.get("usage") or None)]
        if kind == "turn.failed":
            err = obj.get("error")
            message = err.get("message") if isinstance(err, dict) else None
            return [AgentEvent.error(f"codex: {message or self.last_error or 'the turn failed'}")]
        if kind == "error":
            # Also printed for retries ("Reconnecting… 1/5"); only turn.failed or the exit is final.
            self.last_error = str(obj.get("message") or "")
        return []

    def _item(self, item: dict[str, Any], completed: bool) -> list[AgentEvent]:
        kind = _item_type(item)
        item_id = str(item.get("id") or "")
        if kind in _ASSISTANT:
            text = item.get("text") or ""
            if not completed or not text:
                return []
            self.last_message = text
            return [AgentEvent.thinking(text)]
        if kind == "error":
            # "Model metadata for `x` not found" and other warnings: the run goes on.
            log.debug("codex warning item: %s", item.get("message"))
            return []
        if not completed:
            self._started.add(item_id)
            ev = _tool_use(kind, item)
            return [ev] if ev else []
        out: list[AgentEvent] = []
        if item_id not in self._started and (use := _tool_use(kind, item)):
            out.append(use)
        self._started.discard(item_id)
        if result := _tool_result(kind, item):
            out.append(result)
        return out


@dataclass(slots=True)
class AppServerParser:
    """`codex app-server` notifications (method + params). Requests and responses are the adapter's."""

    last_message: str | None = None
    last_error: str | None = None
    usage: dict[str, Any] | None = None
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Items started and not yet completed, by id: an approval request names only the item id."""
    _streamed: set[str] = field(default_factory=set)

    def feed(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        if method == "item/agentMessage/delta":
            delta = as_text(params.get("delta"))
            self._streamed.add(str(params.get("itemId")))
            return [AgentEvent.thinking(delta)] if delta else []
        if method in ("item/started", "item/completed") and isinstance(params.get("item"), dict):
            return self._item(params["item"], completed=method == "item/completed")
        if method == "thread/tokenUsage/updated":
            usage = params.get("tokenUsage")
            self.usage = usage.get("total") if isinstance(usage, dict) else None
            return []
        if method == "error":
            err = params.get("error")
            self.last_error = as_text(err.get("message")) if isinstance(err, dict) else None
            return []
        if method == "turn/completed":
            turn = params.get("turn") if isinstance(params.get("turn"), dict) else {}
            status = turn.get("status")
            if status == "completed":
                return [AgentEvent.done(summary=self.last_message, stats=self.usage)]
            err = turn.get("error")
            message = (err.get("message") if isinstance(err, dict) else None) or self.last_error
            return [AgentEvent.error(f"codex: turn {status}" + (f": {message}" if message else ""))]
        return []

    def _item(self, item: dict[str, Any], completed: bool) -> list[AgentEvent]:
        kind = _item_type(item)
        item_id = str(item.get("id") or "")
        if kind in _ASSISTANT:
            if not completed:
                return []
            text = as_text(item.get("text"))
            self.last_message = text or self.last_message
            if item_id in self._streamed or not text:
                return []
            return [AgentEvent.thinking(text)]
        if not completed:
            self.items[item_id] = item
            ev = _tool_use(kind, item)
            return [ev] if ev else []
        out: list[AgentEvent] = []
        if self.items.pop(item_id, None) is None and (use := _tool_use(kind, item)):
            out.append(use)
        if result := _tool_result(kind, item):
            out.append(result)
        return out

    def describe(self, method: str, params: dict[str, Any]) -> tuple[str, Any]:
        """The tool name and input an approval request is about, for the question to the user."""
        if method == "item/fileChange/requestApproval":
            item = self.items.get(str(params.get("itemId")), {})
            return FILE_CHANGE, {"changes": item.get("changes"), "reason": params.get("reason")}
        return SHELL, {"command": params.get("command"), "cwd": params.get("cwd")}
