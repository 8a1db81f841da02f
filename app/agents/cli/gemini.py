"""The Google Gemini CLI as an agent.

- `AGENT_FORCE=true`: `gemini --output-format stream-json --approval-mode yolo --prompt=<text>`. Headless
  mode offers no approval channel (without yolo it does not even offer write tools to the model), and it
  appends stdin to the prompt, so stdin is closed at once.
- `AGENT_FORCE=false`: `gemini --acp` (Agent Client Protocol, JSON-RPC 2.0 over stdio). Its
  `session/request_permission` is a call of an approval (`gemini_call`); each decision selects the ACP
  option of its kind (`pick_option`).

With the run's calls, the run's tool server (`tools.py`) is the MCP server `a2a`, in both modes in a system
settings file of the run's (GEMINI_CLI_SYSTEM_SETTINGS_PATH), with `trust`: Gemini never asks before the
run's own tools (an ACP `session/new` entry cannot carry `trust`, so none is sent).

Both trust the workspace (`--skip-trust`): it is the folder the server was told the agent works in, and an
untrusted folder makes headless Gemini exit 55. A later unattended turn in the same context resumes the CLI
session (`--resume <id>`). ACP turns start a new session each time: 0.61.0's `session/load` rewrites the
stored session before reading it and then finds nothing to resume ("No previous sessions found"), and
`--resume` is ignored with `--acp`.

Gemini keeps a session in `<GEMINI_CLI_HOME or HOME>/.gemini/tmp/<project>/chats/session-<time>-<first 8 of
the id>.jsonl`, `<project>` a name it gives the workspace's path (`.gemini/projects.json`, and the marker
`.project_root` in that folder naming the path). An unattended run's checkpoint (`checkpoint.py`) carries the
session's chat files; a restore puts them in the project folder of this machine's workspace path (the one
this HOME's registry names, else the same name) and writes its marker, where `--resume` finds them. An ACP
run carries no session (it resumes none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ..approvals import ALLOW_ALWAYS, ALLOW_ONCE, Rule, ToolCall, text_diff
from ..events import AgentEvent
from ..jail.sandbox import TOOLS_SERVER_NAME, agent_env
from ..sdk import Request
from .gemini_events import AcpParser, StreamJsonParser, acp_usage
from .modes import HeadlessRun, RpcRun, TwoModeAgent
from .run import CliRun

ACP_VERSION = 1
SYSTEM_SETTINGS_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
"""Where Gemini CLI reads its system settings (by default /etc/gemini-cli/settings.json)."""
DONE_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal"}


def auth_method(env: Mapping[str, str]) -> str | None:
    """The ACP auth method the CLI's credentials (its environment) call for; None: the CLI's own login."""
    if env.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("1", "true"):
        return "vertex-ai"
    if env.get("GEMINI_API_KEY"):
        return "gemini-api-key"
    return None


def pick_option(options: list[Any], choice: str) -> str | None:
    """The permission option of the user's choice (ACP names its kinds as `approvals.py` does, denying
    `reject_once`), the nearest one when the CLI offers no such kind; None if none fits."""
    kinds = {
        ALLOW_ONCE: ("allow_once", "allow_always"),
        ALLOW_ALWAYS: ("allow_always", "allow_once"),
    }.get(choice, ("reject_once", "reject_always"))
    for kind in kinds:
        for option in options:
            if isinstance(option, dict) and option.get("kind") == kind and option.get("optionId"):
                return str(option["optionId"])
    return None


def gemini_call(request_id: Any, name: str, tool_input: Any, call: dict[str, Any]) -> ToolCall:
    """A permission request as the call it asks for: `allow_always` covers the tool (ACP gives no command
    pattern); an edit carries the diff of its `diff` content."""
    diffs = [
        text_diff(
            str(c.get("path") or "file").lstrip("/"), str(c.get("oldText") or ""), str(c.get("newText") or "")
        )
        for c in call.get("content") or ()
        if isinstance(c, dict) and c.get("type") == "diff"
    ]
    return ToolCall(
        id=str(call.get("toolCallId") or request_id),
        name=name,
        input=tool_input,
        always=Rule(name),
        diff="".join(diffs) or None,
    )


PROJECT_MARKER = ".project_root"
"""The file in a Gemini project folder naming the path it is of."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


class GeminiHeadlessRun(HeadlessRun):
    """One unattended `gemini -p` turn."""

    def __init__(self, request: Request, agent: GeminiAgent) -> None:
        super().__init__(request, agent)
        self.parser = StreamJsonParser()
        self._restored_project: str | None = None

    def _gemini_dir(self, home: Path) -> Path:
        env = agent_env(self.options, home, {})
        return Path(env.get("GEMINI_CLI_HOME") or home) / ".gemini"

    def session_files(self, home: Path, session_id: str) -> list[Path] | None:
        gemini = self._gemini_dir(home).resolve()
        if gemini != home and home not in gemini.parents:
            return None  # the operator's folder: not carried
        projects = gemini / "tmp"
        try:
            folders = [p for p in projects.iterdir() if _read(p / PROJECT_MARKER) == str(self.workspace)]
        except OSError:
            return []
        chats = [f for p in folders for f in (p / "chats").glob(f"session-*-{session_id[:8]}.json*")]
        return sorted(chats) + [
            p / "chats" / session_id for p in folders if (p / "chats" / session_id).is_dir()
        ]

    def _project_here(self, home: Path, before: str) -> str:
        """The project folder name this HOME's registry gives the workspace, else the checkpoint's."""
        try:
            known = json.loads((self._gemini_dir(home) / "projects.json").read_text()).get("projects") or {}
        except (OSError, ValueError, AttributeError):
            known = {}
        name = known.get(str(self.workspace)) if isinstance(known, dict) else None
        return name if isinstance(name, str) and name and "/" not in name and name != ".." else before

    def session_place(self, rel: PurePosixPath, home: Path) -> PurePosixPath:
        base = self._gemini_dir(home).relative_to(home).parts  # GEMINI_CLI_HOME in the HOME, or the HOME
        n = len(base)
        if rel.parts[: n + 1] != (*base, "tmp") or len(rel.parts) < n + 3:
            return rel
        self._restored_project = self._project_here(home, rel.parts[n + 1])
        return PurePosixPath(*base, "tmp", self._restored_project, *rel.parts[n + 2 :])

    def session_restored(self, home: Path) -> None:
        """The restored project folder names this machine's workspace path (its marker)."""
        if self._restored_project is not None:
            folder = self._gemini_dir(home) / "tmp" / self._restored_project
            folder.mkdir(parents=True, exist_ok=True)
            (folder / PROJECT_MARKER).write_text(str(self.workspace))

    def environment(self) -> dict[str, str]:
        return tools_settings(self)

    def command(self) -> list[str]:
        argv = [self.agent.binary, "--output-format", "stream-json", "--approval-mode", "yolo"]
        argv.append("--skip-trust")
        if self.options.model:
            argv += ["--model", self.options.model]
        if session := self.session_id():
            argv += ["--resume", session]
        return [*argv, f"--prompt={self.prompt()}"]


def tools_settings(run: CliRun) -> dict[str, str]:
    """With the run's tools: system settings naming them, trusted (no confirmation: they act for the run's
    own task alone). Headless Gemini reads MCP servers from its settings only, and an ACP session's own
    `mcpServers` cannot say `trust`, so both modes name them here; `mcpServers` merges with the user's, and a
    system file the jail hides anyway."""
    tools = run.tools_command()
    if not tools:
        return {}
    server = {"command": tools[0], "args": tools[1:], "trust": True}
    settings = json.dumps({"mcpServers": {TOOLS_SERVER_NAME: server}})
    return {SYSTEM_SETTINGS_ENV: run.tools_file("gemini-settings.json", settings)}


class GeminiAcpRun(RpcRun):
    """One turn through `gemini --acp`, asking the user before each tool that needs permission."""

    label = "gemini --acp"
    jsonrpc_field = True

    def __init__(self, request: Request, agent: GeminiAgent) -> None:
        super().__init__(request, agent)
        self.parser = AcpParser()
        self.acp_session: str | None = None

    def command(self) -> list[str]:
        argv = [self.agent.binary, "--acp", "--skip-trust"]
        if self.options.model:
            argv += ["--model", self.options.model]
        return argv

    async def begin(self) -> None:
        capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        await self.call("initialize", {"protocolVersion": ACP_VERSION, "clientCapabilities": capabilities})

    def on_notification(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        if method == "session/update" and isinstance(params.get("update"), dict):
            return self.parser.feed(params["update"])
        return []

    def environment(self) -> dict[str, str]:
        return tools_settings(self)

    async def _open_session(self) -> None:
        # The run's tools come from the system settings (`tools_settings`): one named here would replace
        # that entry, untrusted, and Gemini would ask before each call.
        await self.call("session/new", {"cwd": str(self.workspace), "mcpServers": []})

    async def on_response(self, method: str | None, result: dict[str, Any], error: Any) -> list[AgentEvent]:
        if error is not None:
            return self.failed(method, error)
        if method == "initialize":
            methods = {m.get("id") for m in result.get("authMethods") or () if isinstance(m, dict)}
            if (auth := auth_method(self.proc.env if self.proc else {})) in methods:
                await self.call("authenticate", {"methodId": auth})
            else:
                await self._open_session()
        elif method == "authenticate":
            await self._open_session()
        elif method == "session/new":
            # Not remembered: an ACP session cannot be resumed (see the module docstring).
            self.acp_session = result.get("sessionId")
            prompt = [{"type": "text", "text": self.prompt()}]
            await self.call("session/prompt", {"sessionId": self.acp_session, "prompt": prompt})
            return [AgentEvent.init(model=self.options.model, session_id=self.acp_session)]
        elif method == "session/prompt":
            reason = result.get("stopReason")
            if reason in DONE_REASONS:
                meta = result.get("_meta") if isinstance(result.get("_meta"), dict) else {}
                usage = acp_usage(meta.get("quota"), self.options.model)
                return [AgentEvent.done(summary=self.parser.summary, stats=meta.get("quota"), usage=usage)]
            return [AgentEvent.error(f"gemini: the turn ended: {reason}")]
        return []

    async def on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        if method == "session/request_permission":
            call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
            options = params.get("options") if isinstance(params.get("options"), list) else []
            known = self.parser.known(call)
            use = self.parser.tool_use(call)
            asked = gemini_call(request_id, str(use.tool_name), call.get("title") or use.tool_input, call)
            return [*([] if known else [use]), *await self.ask_permission(asked, (request_id, options))]
        await self.refuse(request_id, method)
        return []

    async def decide(self, handle: Any, call: ToolCall, option: str) -> None:
        """Select the ACP option of the kind the user chose (`allow_once`, `allow_always`, `reject_once`)."""
        if self.proc is None:
            return
        request_id, options = handle
        chosen = pick_option(options, option)
        outcome = {"outcome": "selected", "optionId": chosen} if chosen else {"outcome": "cancelled"}
        await self.send({"id": request_id, "result": {"outcome": outcome}})

    async def interrupt(self) -> None:
        if self.proc is not None and self.acp_session:
            await self.send({"method": "session/cancel", "params": {"sessionId": self.acp_session}})


class GeminiAgent(TwoModeAgent):
    adapter = "gemini"
    bin_field = "gemini_bin"
    maker = "Google"
    cli = "Gemini CLI"
    skill_name = "Coding with Gemini CLI"
    headless_run = GeminiHeadlessRun
    rpc_run = GeminiAcpRun
