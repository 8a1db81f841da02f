"""Any command that speaks the AgentEvent schema as NDJSON: wrap your own tool without writing Python.

`AGENT_COMMAND` is split like a shell would (no shell runs it) and started in the workspace. Input, on stdin,
one JSON object per line; stdin stays open while the command runs:

    {"type": "prompt", "text": "<the user's text>", "taskId": "…", "contextId": "…", "workspace": "/abs",
     "attachments": ["attachments/notes.txt"], "repository": {"url", "ref", "branch", "base"} or null,
     "tools": ["python3", "-I", "-S", "…/tools_relay.py", "…/tools.sock"] or null,
     "model": "<the task's model, else the role's (AGENT_MODEL)>" or null}
    {"type": "answer", "text": "y", "approved": true}      (after it asked with approval_required)

A run that goes on with a task another holder left (a checkpoint restored: `run.py`) gets the resume note
(`Resumed.note()`, "Your previous run of this task was interrupted ...") as its prompt's `text`.

Output, on stdout, one AgentEvent per line (`kind` or `type` names it; other lines are ignored):

    {"kind": "init", "model": "my-model", "session_id": "abc"}
    {"kind": "thinking", "text": "part of the answer"}
    {"kind": "tool_use", "tool_name": "shell", "tool_input": {"command": "ls"}}
    {"kind": "tool_result", "tool_name": "shell", "text": "README.md"}
    {"kind": "approval_required", "text": "Run rm -rf build?"}
    {"kind": "usage", "usage": {"model": "my-model", "input_tokens": 900, "output_tokens": 120}}
    {"kind": "done", "summary": "what was done", "stats": {"files": 2}, "usage": {...}}
    {"kind": "error", "text": "why it failed", "usage": {...}}

`tools` is the argv of a stdio MCP server with the run's tools (`tools.py`: `send_to_agent` and the rest),
when the server gives the run calls to other agents: start it and speak MCP to it, as the CLIs do.

The run ends at `done` or `error` (stdin is then closed); exiting without one fails the task with the exit
status and the end of stderr.

`usage` (on `usage`, `done` and `error`) is what the command used since it started or last reported:
`model`, `input_tokens` (uncached), `output_tokens`, `cache_read_tokens`, `cache_write_tokens`,
`cost_usd` (leave it out to have the price table price it), `turns`, `wall_ms`, `tool_calls` (the server
fills in the last two when left out: its time and the `tool_use` lines); several models as
`{"models": [{"model": ..., "input_tokens": ...}, ...], "turns": ...}`. A `usage` that is not one is ignored.
"""

from __future__ import annotations

import logging
import shlex
from typing import Any

from app.protocol.model import Message
from app.protocol.usage import Usage, UsageError

from ..events import AgentEvent, AgentEventKind
from ..options import AgentOptions
from ..sdk import Request, Skill
from .run import CliAgent, CliRun, approval_decision

log = logging.getLogger(__name__)

_MODEL_KEYS = {
    "model": "model",
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "cache_read_tokens": "cacheReadTokens",
    "cache_write_tokens": "cacheWriteTokens",
    "cost_usd": "costUsd",
}
_RUN_KEYS = {"wall_ms": "wallMs", "turns": "turns", "tool_calls": "toolCalls"}


def parse_usage(raw: Any) -> Usage | None:
    """A line's `usage` (snake_case, one model or `models`) as a report; None when absent or not one."""
    if not isinstance(raw, dict):
        return None

    def model(d: Any) -> Any:
        return {w: d[k] for k, w in _MODEL_KEYS.items() if k in d} if isinstance(d, dict) else d

    models = raw.get("models")
    wire: dict[str, Any] = {w: raw[k] for k, w in _RUN_KEYS.items() if k in raw}
    wire["models"] = [model(m) for m in models] if isinstance(models, list) else [model(raw)]
    try:
        return Usage.from_wire(wire)
    except UsageError as exc:
        log.warning("ndjson agent: ignoring a usage that is not one (%s)", exc)
        return None


def parse_event(obj: dict[str, Any]) -> AgentEvent | None:
    """An AgentEvent from one line's object, or None when it names no known kind."""
    try:
        kind = AgentEventKind(obj.get("kind") or obj.get("type"))
    except ValueError:
        return None

    def text(key: str) -> str | None:
        value = obj.get(key)
        return value if isinstance(value, str) else None

    stats = obj.get("stats")
    return AgentEvent(
        kind,
        text=text("text") or "",
        tool_name=text("tool_name"),
        tool_input=obj.get("tool_input"),
        model=text("model"),
        session_id=text("session_id"),
        summary=text("summary"),
        stats=stats if isinstance(stats, dict) else None,
        usage=parse_usage(obj.get("usage")),
    )


class NdjsonRun(CliRun):
    def __init__(self, request: Request, agent: NdjsonAgent) -> None:
        super().__init__(request, agent)

    def command(self) -> list[str]:
        return self.agent.program()

    async def begin(self) -> None:
        assert self.proc is not None
        await self.proc.send(
            {
                "type": "prompt",
                "text": self.request.message.text() if self.note is None else self.note,
                "taskId": self.request.task_id,
                "contextId": self.request.context_id,
                "workspace": str(self.workspace),
                "attachments": self.repo.attached,
                "repository": self.repo.described(),
                "tools": self.tools_command(),
                "model": self.options.model,
            }
        )

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        ev = parse_event(obj)
        return [ev] if ev is not None else []

    async def respond(self, message: Message) -> None:
        assert self.proc is not None
        await self.proc.send(
            {"type": "answer", "text": message.text(), "approved": approval_decision(message)}
        )


COMMAND_SKILL = Skill(
    id="command",
    name="Custom command",
    description="Runs the configured command with the user's text and streams what it reports.",
    tags=("custom",),
)
"""The one skill of a command of the operator's own: the server cannot know what it does."""


class NdjsonAgent(CliAgent):
    adapter = "ndjson"
    description = "A command of your own that prints AgentEvents as NDJSON (AGENT_COMMAND)."
    run_class = NdjsonRun
    skills = (COMMAND_SKILL,)

    program_field = "command"

    def __init__(self, options: AgentOptions) -> None:
        try:
            argv = shlex.split(options.command or "")
        except ValueError as exc:
            raise options.error("command", f"cannot be split like a shell would: {exc}") from None
        if not argv:
            raise ValueError(f"AGENT_ADAPTER=ndjson needs {options.where('command')}, the command to run")
        self._argv = argv
        super().__init__(options)

    def program(self) -> list[str]:
        return list(self._argv)
