"""Codex output → AgentEvents, without any process: `codex exec --json` lines and `codex app-server`
notifications. Kept apart from the adapter so each printed shape is unit-tested on its own.

Both parsers keep a little state (the thread id, the last assistant text, usage) because Codex spreads
what one AgentEvent needs over several lines: the `done` summary is the last agent message, and usage
arrives before `turn/completed` in the app-server protocol.

Codex reports token usage for the whole thread (0.169.0): `turn.completed` of a resumed thread in `exec`
counts every earlier turn too, and `thread/tokenUsage/updated` gives the thread's `total` (a resumed thread
first repeats the previous turn's). A turn's usage is the thread's total now less its total before the turn:
`exec` takes that from the adapter (kept with the session, `baseline`), the app-server from the totals
of other turns it repeats (the kept one as a floor). Its input tokens include the cached and cache-write
ones; `codex_usage` makes them the server's (`app/protocol/usage.py`). Codex reports no cost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.protocol.usage import ModelUsage, Usage

from ..events import AgentEvent, as_text, count

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


_KEYS = {
    "input": ("input_tokens", "inputTokens"),
    "cached": ("cached_input_tokens", "cachedInputTokens"),
    "cache_write": ("cache_write_input_tokens", "cacheWriteInputTokens"),
    "output": ("output_tokens", "outputTokens"),
    "reasoning": ("reasoning_output_tokens", "reasoningOutputTokens"),
}


def thread_tokens(raw: Any) -> dict[str, int]:
    """Codex's token usage (`exec`'s snake_case or the app-server's camelCase) as plain counts."""
    raw = raw if isinstance(raw, dict) else {}
    return {k: count(next((raw[n] for n in names if n in raw), 0)) for k, names in _KEYS.items()}


def kept_tokens(kept: Any) -> dict[str, int] | None:
    """Counts as `thread_tokens` made them and the adapter kept them (with the session); None if none."""
    if not isinstance(kept, dict):
        return None
    return {k: count(kept.get(k, 0)) for k in _KEYS}


def turn_tokens(total: dict[str, int], before: dict[str, int] | None) -> dict[str, int]:
    """What one turn used: the thread's total after it less its total before (never below zero; a total
    that went down, a thread Codex started afresh, counts whole)."""
    if not before or any(total.get(k, 0) < before.get(k, 0) for k in _KEYS):
        return dict(total)
    return {k: total.get(k, 0) - before.get(k, 0) for k in _KEYS}


def codex_usage(tokens: dict[str, int], model: str | None) -> Usage:
    """A turn's counts as a usage report: cached and cache-write input out of the input tokens."""
    cached, written = tokens.get("cached", 0), tokens.get("cache_write", 0)
    one = ModelUsage(
        model or "",
        input_tokens=max(0, tokens.get("input", 0) - cached - written),
        output_tokens=tokens.get("output", 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )
    return Usage((one,))


@dataclass(slots=True)
class ExecParser:
    """`codex exec --json`: one event per line, whole items only (no text deltas)."""

    model: str | None = None
    thread_id: str | None = None
    last_message: str | None = None
    last_error: str | None = None
    baseline: dict[str, int] | None = None
    """The thread's token usage before this turn (kept with the session by the adapter)."""
    total: dict[str, int] | None = None
    """The thread's token usage after this turn, once `turn.completed` says it."""
    _started: set[str] = field(default_factory=set)

    def feed(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj.get("type")
        if kind == "thread.started":
            self.thread_id = obj.get("thread_id") or self.thread_id
            return [AgentEvent.init(model=self.model, session_id=self.thread_id)]
        if kind in ("item.started", "item.completed") and isinstance(obj.get("item"), dict):
            return self._item(obj["item"], completed=kind == "item.completed")
        if kind == "turn.completed":
            self.total = thread_tokens(obj.get("usage"))
            usage = codex_usage(turn_tokens(self.total, self.baseline), self.model)
            return [AgentEvent.done(summary=self.last_message, stats=obj.get("usage") or None, usage=usage)]
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
    """The thread's total token usage as last reported (the `result` artifact's stats)."""
    model: str | None = None
    baseline: dict[str, int] | None = None
    """The thread's token usage before this turn as the adapter kept it (a floor for `before`)."""
    totals: dict[str, dict[str, int]] = field(default_factory=dict)
    """The thread's total token usage as last reported during each turn, by turn id."""
    total: dict[str, int] | None = None
    """The thread's token usage after this turn, once it completed."""
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
            self.totals[str(params.get("turnId"))] = thread_tokens(self.usage)
            return []
        if method == "error":
            err = params.get("error")
            self.last_error = as_text(err.get("message")) if isinstance(err, dict) else None
            return []
        if method == "turn/completed":
            turn = params.get("turn") if isinstance(params.get("turn"), dict) else {}
            status = turn.get("status")
            usage = self._turn_usage(str(turn.get("id")))
            if status == "completed":
                return [AgentEvent.done(summary=self.last_message, stats=self.usage, usage=usage)]
            err = turn.get("error")
            message = (err.get("message") if isinstance(err, dict) else None) or self.last_error
            reason = f"codex: turn {status}" + (f": {message}" if message else "")
            return [AgentEvent.error(reason, usage=usage)]
        return []

    def _turn_usage(self, turn_id: str) -> Usage | None:
        """This turn's usage: its last total less the largest total reported for another turn (a resumed
        thread repeats the previous one's) or kept from before; None when Codex reported none."""
        total = self.totals.get(turn_id)
        if total is None:
            return None
        self.total = total
        before = [t for tid, t in self.totals.items() if tid != turn_id]
        if self.baseline:
            before.append(self.baseline)
        floor = max(before, key=lambda t: sum(t.values()), default=None)
        return codex_usage(turn_tokens(total, floor), self.model)

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
