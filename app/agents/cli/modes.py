"""The two ways the Codex and Gemini adapters drive their CLI, shared so each adapter keeps only its protocol.

The role's `force` (else `AGENT_FORCE`) picks the mode, unless the task asked for approvals with
`metadata.force: false` (`TwoModeAgent.start`, `approvals.unattended`):

- `HeadlessRun` (`AGENT_FORCE=true`): the prompt is on the command line and there is no approval channel.
  stdin is closed at once (the CLIs read it to its end, or append it to the prompt); a parser turns each
  printed object into events and keeps the last error the CLI reported for the exit reason.
- `RpcRun` (`AGENT_FORCE=false`): JSON-RPC over stdio. The adapter calls methods (`call`), answers the CLI's
  requests (approvals), and reads its notifications; each response is matched to the method it answers.
"""

from __future__ import annotations

import itertools
import logging
from abc import abstractmethod
from typing import Any, Protocol

from ..approvals import unattended
from ..events import AgentEvent, AgentEventKind, AgentRun
from ..sdk import Request
from .run import CliAgent, CliRun, coding_skill, exit_reason

log = logging.getLogger(__name__)


class StreamParser(Protocol):
    """What a headless run needs of its parser."""

    last_error: str | None

    def feed(self, obj: dict[str, Any]) -> list[AgentEvent]: ...


class HeadlessRun(CliRun):
    """One unattended turn: the subclass sets `parser` and builds the command (the prompt in it)."""

    parser: StreamParser

    async def begin(self) -> None:
        assert self.proc is not None
        await self.proc.close_stdin()

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        """The parser's events; the session the CLI announces (its `init`) is resumed by the next turn."""
        events = self.parser.feed(obj)
        for ev in events:
            if ev.kind is AgentEventKind.INIT:
                self.remember_session(ev.session_id)
        return events

    def on_exit(self, code: int) -> list[AgentEvent]:
        """The exit reason with the last error the CLI printed (a bad model or no quota shows only there)."""
        assert self.proc is not None
        reason = exit_reason(self.adapter, code, self.proc.stderr_tail())
        if self.parser.last_error:
            reason = f"{reason} (last error: {self.parser.last_error})"
        return [AgentEvent.error(reason)]


class RpcRun(CliRun):
    """One turn spoken in JSON-RPC over the CLI's stdio; the subclass implements the three `on_*` hooks."""

    interruptible = True
    label = "the CLI"
    """Names the CLI in the failure of a call, e.g. `codex app-server`."""
    jsonrpc_field = False
    """True: every message carries `"jsonrpc": "2.0"` (ACP wants it; codex app-server leaves it out)."""

    def __init__(self, request: Request, agent: CliAgent) -> None:
        super().__init__(request, agent)
        self._ids = itertools.count(1)
        self._calls: dict[int, str] = {}

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None
        await self.proc.send({"jsonrpc": "2.0", **message} if self.jsonrpc_field else message)

    async def call(self, method: str, params: dict[str, Any]) -> None:
        """Call `method`; its response comes to `on_response` with the method's name."""
        call_id = next(self._ids)
        self._calls[call_id] = method
        await self.send({"id": call_id, "method": method, "params": params})

    async def refuse(self, request_id: Any, method: str) -> None:
        """Answer a request this server does not support with JSON-RPC's method-not-found."""
        log.info("%s: refusing unsupported request %s", self.adapter, method)
        error = {"code": -32601, "message": f"{method} is not supported by this A2A server"}
        await self.send({"id": request_id, "error": error})

    def failed(self, method: str | None, error: Any) -> list[AgentEvent]:
        message = error.get("message") if isinstance(error, dict) else error
        return [AgentEvent.error(f"{self.label}: {method} failed: {message}")]

    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        method = obj.get("method")
        params = obj.get("params") if isinstance(obj.get("params"), dict) else {}
        if "id" in obj and isinstance(method, str):
            return await self.on_request(obj["id"], method, params)
        if "id" in obj:
            answered = self._calls.pop(obj["id"], None) if isinstance(obj["id"], int) else None
            result = obj.get("result") if isinstance(obj.get("result"), dict) else {}
            return await self.on_response(answered, result, obj.get("error"))
        if isinstance(method, str):
            return self.on_notification(method, params)
        return []

    @abstractmethod
    async def on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        """A request from the CLI (an approval, or something to `refuse`)."""

    @abstractmethod
    async def on_response(self, method: str | None, result: dict[str, Any], error: Any) -> list[AgentEvent]:
        """The response to our call of `method` (None: not a call of ours)."""

    @abstractmethod
    def on_notification(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        """A notification from the CLI: the turn's progress."""


class TwoModeAgent(CliAgent):
    """A CLI adapter with both modes: `headless_run` under AGENT_FORCE=true, else `rpc_run`.

    Its card's description and coding skill are one template for both adapters, filled in from `maker`,
    `cli` and `skill_name` (`__init_subclass__`), so each adapter names only its CLI.
    """

    headless_run: type[HeadlessRun]
    rpc_run: type[RpcRun]
    maker: str
    """Who makes the CLI, e.g. "OpenAI"."""
    cli: str
    """The CLI's name on the card, e.g. "Codex CLI"."""
    skill_name: str
    """The coding skill's name on the card, e.g. "Coding with Codex"."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.description = f"{cls.maker} {cls.cli} working in a workspace: edits files and runs commands."
        cls.skills = (coding_skill(cls.skill_name, f"the {cls.cli}", cls.adapter),)

    def start(self, request: Request) -> AgentRun:
        forced = unattended(self.options.force, [*request.history, request.message])
        run = self.headless_run if forced else self.rpc_run
        return run(request, self)
