"""Claude Code behind the agent API: `claude -p` with stream-json in and out, stdin open for approvals.

The prompt goes in as a stream-json user message and stdin stays open, because Claude asks for tool
permission (`--permission-prompt-tool stdio`) with a `control_request` on stdout and reads the
`control_response` from stdin; closing stdin early makes every permission request fail closed.

| Claude stream-json line                                 | AgentEvent                                  |
|---------------------------------------------------------|---------------------------------------------|
| `system`/`init`                                         | init(model, session_id); session remembered |
| `stream_event` text_delta (`--include-partial-messages`) | thinking(delta)                             |
| `assistant` text not already streamed                   | thinking(text)                              |
| `assistant` tool_use                                    | tool_use(name, input)                       |
| `user` tool_result                                      | tool_result(content, tool name)             |
| `control_request` can_use_tool                          | approval_required(question, the call)       |
| `result` success / error                                | done(result, stats) / error(result text)    |
| `result` error without text (`error_during_execution`)  | none; at exit: error(exit status, stderr)   |

`done` and `error` carry the run's usage from the `result` line (`claude_usage`): per model from
`modelUsage` (tokens, cache reads and writes, `costUSD`), else `usage` and `total_cost_usd` for the model
`init` named; `num_turns` as its turns. Claude reports what this process used, so a resumed session's
earlier turns are not in it.

With the run's calls (`TaskContext.calls`), `--mcp-config` names the run's tool server (`tools.py`) as the MCP
server `a2a`, and `--allowedTools mcp__a2a` lets its tools run without a permission request.

Each permission request is a call of the approval data part (`approvals.py`): `y`/`n` decides every open
one, an approval data part one call; `allow_always` keeps Claude's suggested rule for the tool (`Bash`
`npm test *`) for the context (`CliRun.ask_permission`). A later task in the same context resumes the
session (`--resume`). Cancel sends Claude's own `interrupt` control request first.

Claude Code keeps a session in `~/.claude/projects/<project>/<session id>.jsonl` (and a folder of the same
name beside it, when the session has one), `<project>` the workspace's absolute path escaped as the CLI does
(`claude_project`). A checkpoint carries those (`checkpoint.py`), and a restore puts them in the project
folder of this machine's workspace path, so `--resume` finds them where the workspace moved.

An error `result` with no `result` text is Claude ending the run itself, e.g. resuming a session it no
longer has (2.1.197: subtype `error_during_execution`, `errors: ["No conversation found with session ID:
<id>"]`, the same on stderr, exit 1). Its stdin is closed and the run fails once it exits, as every CLI
that exits non-zero does: `claude exited with status 1: <stderr tail>`.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from app.protocol.usage import COST_REPORTED, ModelUsage, Usage

from ..approvals import ALLOW_ALWAYS, DENY, Rule, ToolCall, text_diff
from ..events import AgentEvent, count
from ..jail.sandbox import TOOLS_SERVER_NAME
from ..sdk import Request
from .run import CliAgent, CliRun, exit_reason

PROJECT_NAME_MAX = 200
"""The longest project folder name Claude Code makes whole; a longer one is cut and given a hash."""


def _js_hash(text: str) -> int:
    """Java's string hash over UTF-16 code units, as the CLI computes it (`(h << 5) - h + c | 0`)."""
    h = 0
    units = text.encode("utf-16-le")
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i : i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def claude_project(cwd: str) -> str:
    """The folder under `~/.claude/projects/` where Claude Code (2.1.197) keeps the sessions of `cwd`: every
    UTF-16 code unit but ASCII letters and digits becomes `-`; past 200 the name is cut and the path's
    hash (base 36) added."""
    name = re.sub(r"[^a-zA-Z0-9]", lambda m: "-" * (2 if ord(m.group()) > 0xFFFF else 1), cwd)
    if len(name) <= PROJECT_NAME_MAX:
        return name
    return f"{name[:PROJECT_NAME_MAX]}-{_base36(abs(_js_hash(cwd)))}"


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def _cost(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        else None
    )


# The token counts' keys (input, output, cache read, cache write): `modelUsage` entries spell them in camel
# case, the `usage` object as the Anthropic API does.
PER_MODEL_KEYS = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
TOTAL_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _model_usage(
    name: str, u: dict[str, Any], keys: tuple[str, str, str, str], cost: float | None
) -> ModelUsage:
    inputs, outputs, cache_reads, cache_writes = keys
    return ModelUsage(
        name,
        input_tokens=count(u.get(inputs)),
        output_tokens=count(u.get(outputs)),
        cache_read_tokens=count(u.get(cache_reads)),
        cache_write_tokens=count(u.get(cache_writes)),
        cost_usd=cost,
        cost_source=COST_REPORTED if cost is not None else None,
    )


def claude_usage(result: dict[str, Any], model: str | None) -> Usage | None:
    """What a `result` line says the run used (None when it says nothing): `modelUsage` per model, else
    `usage` and `total_cost_usd` for `model` (the one `init` named)."""
    per_model = result.get("modelUsage")
    models: list[ModelUsage] = []
    if isinstance(per_model, dict) and per_model:
        for name, u in per_model.items():
            if not isinstance(u, dict):
                continue
            models.append(_model_usage(str(name), u, PER_MODEL_KEYS, _cost(u.get("costUSD"))))
    elif isinstance(usage := result.get("usage"), dict) or result.get("total_cost_usd") is not None:
        u = usage if isinstance(usage, dict) else {}
        models.append(_model_usage(model or "", u, TOTAL_KEYS, _cost(result.get("total_cost_usd"))))
    turns = result.get("num_turns")
    if not models and turns is None:
        return None
    return Usage(tuple(models), turns=count(turns) if turns is not None else None)


def claude_call(request_id: str, request: dict[str, Any]) -> ToolCall:
    """A `can_use_tool` request as the call it asks for: `allow_always` takes the command pattern Claude
    suggests for the tool (its first `addRules` rule naming it, e.g. Bash `npm test *`), else the whole
    tool; an `Edit` or `Write` carries the diff it would make."""
    name = str(request.get("tool_name") or request.get("display_name") or "a tool")
    tool_input = request.get("input") if isinstance(request.get("input"), dict) else {}
    pattern = None
    for suggestion in request.get("permission_suggestions") or ():
        if isinstance(suggestion, dict) and suggestion.get("type") == "addRules":
            for rule in suggestion.get("rules") or ():
                if isinstance(rule, dict) and rule.get("toolName") == name:
                    pattern = pattern or rule.get("ruleContent")
    command = tool_input.get("command")
    return ToolCall(
        id=str(request.get("tool_use_id") or request_id),
        name=name,
        input=tool_input,
        always=Rule(name, pattern if isinstance(pattern, str) and pattern else None),
        command=command if isinstance(command, str) else None,
        diff=_edit_diff(name, tool_input),
    )


def _edit_diff(name: str, tool_input: dict[str, Any]) -> str | None:
    path = tool_input.get("file_path")
    if not isinstance(path, str):
        return None
    path = path.lstrip("/")
    if name == "Edit" and isinstance(tool_input.get("old_string"), str):
        return text_diff(path, tool_input["old_string"], str(tool_input.get("new_string") or ""))
    if name == "Write" and isinstance(tool_input.get("content"), str):
        return text_diff(path, "", tool_input["content"])
    return None


class ClaudeRun(CliRun):
    interruptible = True

    def __init__(self, request: Request, agent: ClaudeAgent) -> None:
        super().__init__(request, agent)
        self._streamed: set[str] = set()
        self._tools: dict[str, str] = {}
        self._started = False
        self._failure: str | None = None
        self._failure_usage: Usage | None = None
        self._model: str | None = None

    def command(self) -> list[str]:
        o = self.options
        argv = [self.agent.binary, "-p", "--output-format", "stream-json", "--verbose"]
        argv += ["--input-format", "stream-json", "--include-partial-messages"]
        if self.unattended:
            argv.append("--dangerously-skip-permissions")
        else:
            argv += ["--permission-prompt-tool", "stdio", "--permission-mode", "default"]
        if o.model:
            argv += ["--model", o.model]
        if session := self.session_id():
            argv += ["--resume", session]
        if tools := self.tools_command():
            server = {"type": "stdio", "command": tools[0], "args": tools[1:]}
            config = json.dumps({"mcpServers": {TOOLS_SERVER_NAME: server}})
            argv += ["--mcp-config", config, "--allowedTools", f"mcp__{TOOLS_SERVER_NAME}"]
        return argv

    def session_files(self, home: Path, session_id: str) -> list[Path] | None:
        project = home / ".claude" / "projects" / claude_project(str(self.workspace))
        return [p for p in (project / f"{session_id}.jsonl", project / session_id) if p.exists()]

    def session_place(self, rel: PurePosixPath, home: Path) -> PurePosixPath:
        """A session file goes to the project folder of this machine's workspace path."""
        if rel.parts[:2] == (".claude", "projects") and len(rel.parts) > 3:
            return PurePosixPath(".claude", "projects", claude_project(str(self.workspace)), *rel.parts[3:])
        return rel

    def environment(self) -> dict[str, str]:
        """In the jail, Claude Code may skip its permission prompts even as root (it refuses otherwise)."""
        return {"IS_SANDBOX": "1"} if self.options.sandbox == "bwrap" else {}

    async def begin(self) -> None:
        assert self.proc is not None
        message = {"role": "user", "content": self.prompt()}
        await self.proc.send(
            {"type": "user", "message": message, "parent_tool_use_id": None, "session_id": "default"}
        )

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "init":
            return self._init(obj)
        if kind == "stream_event":
            return self._stream_event(obj)
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return self._tool_results(obj)
        if kind == "control_request":
            return await self._control(obj)
        if kind == "result":
            return await self._result(obj)
        return []

    def _init(self, obj: dict[str, Any]) -> list[AgentEvent]:
        if self._started:
            return []
        self._started = True
        self.remember_session(obj.get("session_id"))
        self._model = obj.get("model") if isinstance(obj.get("model"), str) else None
        return [AgentEvent.init(model=obj.get("model"), session_id=obj.get("session_id"))]

    def _stream_event(self, obj: dict[str, Any]) -> list[AgentEvent]:
        if obj.get("parent_tool_use_id"):
            return []
        event = obj.get("event") or {}
        if event.get("type") == "message_start":
            self._streamed.add(str((event.get("message") or {}).get("id")))
        elif event.get("type") == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return [AgentEvent.thinking(delta["text"])]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[AgentEvent]:
        message = obj.get("message") or {}
        streamed = str(message.get("id")) in self._streamed
        out: list[AgentEvent] = []
        for block in message.get("content") or []:
            if block.get("type") == "text" and block.get("text"):
                if not streamed and not obj.get("parent_tool_use_id"):
                    out.append(AgentEvent.thinking(block["text"]))
            elif block.get("type") == "tool_use":
                self._tools[str(block.get("id"))] = str(block.get("name"))
                out.append(AgentEvent.tool_use(str(block.get("name")), block.get("input")))
        return out

    def _tool_results(self, obj: dict[str, Any]) -> list[AgentEvent]:
        content = (obj.get("message") or {}).get("content")
        if not isinstance(content, list):
            return []
        return [
            AgentEvent.tool_result(_result_text(b.get("content")), self._tools.get(str(b.get("tool_use_id"))))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]

    async def _control(self, obj: dict[str, Any]) -> list[AgentEvent]:
        request = obj.get("request") or {}
        request_id = str(obj.get("request_id"))
        if request.get("subtype") == "can_use_tool":
            return await self.ask_permission(claude_call(request_id, request), (request_id, request))
        assert self.proc is not None
        error = f"unsupported control request {request.get('subtype')!r}"
        await self.proc.send(
            {
                "type": "control_response",
                "response": {"subtype": "error", "request_id": request_id, "error": error},
            }
        )
        return []

    async def _result(self, obj: dict[str, Any]) -> list[AgentEvent]:
        self.remember_session(obj.get("session_id"))
        text = obj.get("result")
        usage = claude_usage(obj, self._model)
        if obj.get("is_error") or obj.get("subtype") != "success":
            if text:
                return [AgentEvent.error(str(text), usage=usage)]
            # Claude ends the run itself and says why on stderr: fail with that once it has exited.
            errors = [str(e) for e in obj.get("errors") or [] if e]
            self._failure = "; ".join(errors) or f"Claude Code ended with {obj.get('subtype')}"
            self._failure_usage = usage
            assert self.proc is not None
            await self.proc.close_stdin()
            return []
        stats = {
            "turns": obj.get("num_turns"),
            "duration_ms": obj.get("duration_ms"),
            "cost_usd": obj.get("total_cost_usd"),
            "usage": obj.get("usage"),
        }
        stats = {k: v for k, v in stats.items() if v is not None}
        return [AgentEvent.done(summary=text, stats=stats, usage=usage)]

    async def decide(self, handle: Any, call: ToolCall, option: str) -> None:
        """Allow or deny one permission request; `allow_always` also gives Claude the rule for this process
        (`destination: session`: nothing written to the workspace's `.claude/`)."""
        assert self.proc is not None
        request_id, request = handle
        decision: dict[str, Any]
        if option == DENY:
            decision = {"behavior": "deny", "message": "The user denied this."}
        else:
            decision = {"behavior": "allow", "updatedInput": request.get("input") or {}}
            if option == ALLOW_ALWAYS:
                rule = {"toolName": call.always.tool}
                if call.always.pattern:
                    rule["ruleContent"] = call.always.pattern
                update = {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": "session"}
                decision["updatedPermissions"] = [update]
        response = {"subtype": "success", "request_id": request_id, "response": decision}
        await self.proc.send({"type": "control_response", "response": response})

    def on_exit(self, code: int) -> list[AgentEvent]:
        if self._failure is None:
            return super().on_exit(code)
        assert self.proc is not None
        if not code:
            return [AgentEvent.error(self._failure, usage=self._failure_usage)]
        tail = self.proc.stderr_tail()
        detail = tail if self._failure in tail else "\n".join(t for t in (tail, self._failure) if t)
        reason = exit_reason(Path(self.proc.argv[0]).name, code, detail)
        return [AgentEvent.error(reason, usage=self._failure_usage)]

    async def interrupt(self) -> None:
        assert self.proc is not None
        request = {"subtype": "interrupt"}
        await self.proc.send(
            {"type": "control_request", "request_id": f"int-{uuid.uuid4()}", "request": request}
        )


class ClaudeAgent(CliAgent):
    adapter = "claude-code"
    bin_field = "claude_bin"
    description = "Claude Code (the `claude` CLI) working in a workspace per conversation."
    run_class = ClaudeRun
