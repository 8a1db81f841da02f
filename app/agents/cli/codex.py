"""The OpenAI Codex CLI as an agent.

- `AGENT_FORCE=true`: `codex exec --json --dangerously-bypass-approvals-and-sandbox`. exec has no
  approval channel at all (and reads stdin to its end, so stdin is closed at once).
- `AGENT_FORCE=false`: `codex app-server`, JSON-RPC over stdio. Its `item/commandExecution/requestApproval`
  and `item/fileChange/requestApproval` requests are the calls of an approval (`codex_call`); each decision
  goes back as the request's JSON-RPC response (`accept`, `acceptForSession`, `decline`).

With the run's calls, `-c mcp_servers.a2a...` adds the run's tool server (`tools.py`) as an MCP server whose
tools Codex calls without asking.

A later turn in the same context resumes the Codex thread (`exec resume <id>` / `thread/resume`); both
modes share the thread store in CODEX_HOME, so the thread id serves either.

A checkpoint (`checkpoint.py`) carries the thread's rollout file (`$CODEX_HOME/sessions/YYYY/MM/DD/
rollout-<time>-<thread id>.jsonl`, CODEX_HOME by default `~/.codex`) when CODEX_HOME is in the principal's
HOME; a restore puts it at the same place in this machine's HOME, where `resume` looks it up by id.

Usage: Codex counts tokens per thread, so the thread's total after each turn is kept with the session and a
turn reports its own share (`codex_events`); the model is the one the thread names (app-server) or
AGENT_MODEL, else the `model` of `$CODEX_HOME/config.toml` (exec prints none).
"""

from __future__ import annotations

import glob
import json
import logging
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..approvals import ALLOW_ALWAYS, ALLOW_ONCE, Rule, ToolCall
from ..events import AgentEvent, AgentEventKind
from ..jail.sandbox import TOOLS_SERVER_NAME, agent_env
from ..sdk import Request
from .codex_events import AppServerParser, ExecParser, kept_tokens
from .modes import HeadlessRun, RpcRun, TwoModeAgent
from .run import CliRun

log = logging.getLogger(__name__)

APPROVAL_REQUESTS = ("item/commandExecution/requestApproval", "item/fileChange/requestApproval")
APPROVAL_POLICY = "untrusted"
"""Ask before every command Codex does not know to be read-only."""
SANDBOX = "workspace-write"


def configured_model(env: Mapping[str, str]) -> str | None:
    """The `model` of the Codex configuration the CLI reads (`$CODEX_HOME/config.toml`, by default
    `$HOME/.codex/config.toml`), if it names one."""
    home = env.get("CODEX_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".codex")
    try:
        with open(Path(home) / "config.toml", "rb") as f:
            model = tomllib.load(f).get("model")
    except (OSError, ValueError):
        return None
    return model if isinstance(model, str) and model else None


def tools_config(tools: list[str] | None) -> list[str]:
    """`-c` overrides that add the run's tool server (`tools.py`) as Codex's MCP server `a2a`, its tools
    approved without asking; none without it. TOML values: a JSON string or array of strings is one."""
    if not tools:
        return []
    key = f"mcp_servers.{TOOLS_SERVER_NAME}"
    return [
        "-c",
        f"{key}.command={json.dumps(tools[0])}",
        "-c",
        f"{key}.args={json.dumps(tools[1:])}",
        "-c",
        f'{key}.default_tools_approval_mode="approve"',
    ]


def codex_home(env: Mapping[str, str]) -> Path:
    """The CLI's CODEX_HOME: the variable, else `$HOME/.codex`."""
    return Path(env.get("CODEX_HOME") or Path(env.get("HOME", "~")).expanduser() / ".codex")


def rollout_files(run: CliRun, home: Path, thread: str) -> list[Path] | None:
    """The rollout file(s) of `thread` under the run's CODEX_HOME; None when CODEX_HOME is outside the
    principal's HOME (the operator's folder: a checkpoint carries no session then)."""
    store = codex_home(agent_env(run.options, home, run.environment())).resolve()
    if store != home and home not in store.parents:
        return None
    return sorted((store / "sessions").glob(f"*/*/*/rollout-*-{glob.escape(thread)}.jsonl"))


def _kept_usage(data: Mapping[str, Any]) -> dict[str, int] | None:
    return kept_tokens(data.get("usage"))


def _turn_ended(events: list[AgentEvent]) -> bool:
    return any(ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR) for ev in events)


class CodexExecRun(HeadlessRun):
    """One unattended `codex exec` turn."""

    def __init__(self, request: Request, agent: CodexAgent) -> None:
        super().__init__(request, agent)
        self.parser = ExecParser(model=self.options.model, baseline=_kept_usage(self.session_data()))

    async def begin(self) -> None:
        assert self.proc is not None
        self.parser.model = self.parser.model or configured_model(self.proc.env)
        await super().begin()

    def session_files(self, home: Path, session_id: str) -> list[Path] | None:
        return rollout_files(self, home, session_id)

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        events = await super().handle(obj)
        if self.parser.total is not None and _turn_ended(events):
            self.remember_session(self.parser.thread_id, usage=self.parser.total)
        return events

    def command(self) -> list[str]:
        argv = [
            self.agent.binary,
            *tools_config(self.tools_command()),
            "exec",
            "--json",
            "--skip-git-repo-check",
        ]
        argv.append("--dangerously-bypass-approvals-and-sandbox")
        if self.options.model:
            argv += ["--model", self.options.model]
        if thread := self.session_id():
            argv += ["resume", thread]
        return [*argv, "--", self.prompt()]


def codex_call(request_id: Any, name: str, tool_input: Any, params: dict[str, Any]) -> ToolCall:
    """An approval request as the call it asks for: a command's `allow_always` covers the command prefix
    Codex proposes (`proposedExecpolicyAmendment`, e.g. `["npm", "test"]` → `npm test *`), else the whole
    tool; a file change carries its diff."""
    command = params.get("command") if isinstance(params.get("command"), str) else None
    prefix = params.get("proposedExecpolicyAmendment")
    pattern = None
    if (
        command is not None
        and isinstance(prefix, list)
        and prefix
        and all(isinstance(p, str) for p in prefix)
    ):
        pattern = shlex.join(prefix) + " *"
    changes = tool_input.get("changes") if isinstance(tool_input, dict) else None
    diffs = [c["diff"] for c in changes or () if isinstance(c, dict) and isinstance(c.get("diff"), str)]
    call_id = params.get("approvalId") or params.get("itemId") or request_id
    return ToolCall(
        id=str(call_id),
        name=name,
        input=tool_input,
        always=Rule(name, pattern),
        command=command,
        diff="".join(diffs) or None,
    )


class CodexAppServerRun(RpcRun):
    """One turn through `codex app-server`, asking the user before commands and file changes."""

    label = "codex app-server"

    def __init__(self, request: Request, agent: CodexAgent) -> None:
        super().__init__(request, agent)
        self.parser = AppServerParser()
        self.thread_id: str | None = None
        self.turn_id: str | None = None

    def command(self) -> list[str]:
        return [self.agent.binary, *tools_config(self.tools_command()), "app-server"]

    def session_files(self, home: Path, session_id: str) -> list[Path] | None:
        return rollout_files(self, home, session_id)

    async def begin(self) -> None:
        await self.call("initialize", {"clientInfo": {"name": "coding-agent-a2a", "version": "0.1.0"}})

    def _thread_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "cwd": str(self.workspace),
            "approvalPolicy": APPROVAL_POLICY,
            "sandbox": SANDBOX,
        }
        if self.options.model:
            params["model"] = self.options.model
        return params

    def on_notification(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        events = self.parser.feed(method, params)
        if self.parser.total is not None and _turn_ended(events):
            self.remember_session(self.thread_id, usage=self.parser.total)
        return events

    async def on_response(self, method: str | None, result: dict[str, Any], error: Any) -> list[AgentEvent]:
        if method == "thread/resume" and error is not None:
            log.info("codex: cannot resume thread (%s); starting a new one", error)
            await self.call("thread/start", self._thread_params())
            return []
        if error is not None:
            return self.failed(method, error)
        if method == "initialize":
            await self.send({"method": "initialized"})
            if thread := self.session_id():
                await self.call("thread/resume", {"threadId": thread, **self._thread_params()})
            else:
                await self.call("thread/start", self._thread_params())
        elif method in ("thread/start", "thread/resume"):
            thread = result.get("thread") if isinstance(result.get("thread"), dict) else {}
            self.thread_id = thread.get("id")
            if method == "thread/resume":
                self.parser.baseline = _kept_usage(self.session_data())
            self.parser.model = thread.get("model") or self.options.model
            self.remember_session(self.thread_id)
            text = {"type": "text", "text": self.prompt()}
            await self.call("turn/start", {"threadId": self.thread_id, "input": [text]})
            return [AgentEvent.init(model=thread.get("model"), session_id=self.thread_id)]
        elif method == "turn/start":
            turn = result.get("turn") if isinstance(result.get("turn"), dict) else {}
            self.turn_id = turn.get("id")
        return []

    async def on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        if method in APPROVAL_REQUESTS:
            name, tool_input = self.parser.describe(method, params)
            return await self.ask_permission(codex_call(request_id, name, tool_input, params), request_id)
        await self.refuse(request_id, method)
        return []

    async def decide(self, handle: Any, call: ToolCall, option: str) -> None:
        """`accept`, `decline`, or for `allow_always` `acceptForSession` (Codex's own cache, this process
        only; the context's rule is ours): never an execpolicy amendment, which Codex keeps for every
        session of CODEX_HOME."""
        if self.proc is None:
            return
        decision = {ALLOW_ONCE: "accept", ALLOW_ALWAYS: "acceptForSession"}.get(option, "decline")
        await self.send({"id": handle, "result": {"decision": decision}})

    async def interrupt(self) -> None:
        if self.thread_id and self.turn_id:
            await self.call("turn/interrupt", {"threadId": self.thread_id, "turnId": self.turn_id})


class CodexAgent(TwoModeAgent):
    adapter = "codex"
    bin_field = "codex_bin"
    maker = "OpenAI"
    cli = "Codex CLI"
    skill_name = "Coding with Codex"
    headless_run = CodexExecRun
    rpc_run = CodexAppServerRun
