"""What every coding-agent CLI adapter shares: workspace, session memory, approvals, and the run loop.

An adapter is a `CliAgent` subclass whose `run_class` (what `start()` runs) is a `CliRun` subclass
implementing:

- `command()`       the argv (`self.agent.binary`, flags for AGENT_FORCE / AGENT_MODEL / resume);
- `environment()`   extra environment variables (optional);
- `begin()`         what to write once the process runs, e.g. the prompt on stdin (optional);
- `handle(obj)`     one JSON object from stdout → AgentEvents (may `await self.proc.send(...)`);
- `respond(msg)`    the user's answer to an `approval_required` → written to the CLI (optional);
- `interrupt()`     the CLI's own interrupt, with `interruptible = True` (optional);
- `on_exit(code)`   events when stdout closes before a `done`/`error` (the default fits most CLIs).

`CliRun.events()` waits for the context's workspace (one run at a time: `workspace_lock.py`), marks it as
its context's and holds it against the sweep (`sweep.py`), prepares it (the task's repository and attached
files: `repository.py`), starts the process there, feeds every stdout object to `handle`, ends the run at
the first `done` or `error`, fails it on the idle limit (paused while waiting for the user), and always
stops the process group on the way out; at each end of a turn (`done`, `error`, `approval_required`) it
publishes the checkout's change first.
`cancel()` returns once the CLI and its children are gone. An adapter puts `prompt()` (the message's text,
naming the attached files) where it sends the user's text.

With a checkpoint store (`TaskContext.checkpoints`) a run saves its task's checkpoint (`checkpoint.py`) at
each end of a turn (after the CLI stopped for `done`/`error`, while it waits for an approval), every
CHECKPOINT_S while the CLI runs (not while it waits for the user), and when the server drains it (`drain`:
the CLI stopped, then saved). A run that goes on with a task another holder left (`TaskContext.resumed`)
restores the checkpoint before it prepares the workspace and tells the CLI, resuming its session, the note
`Resumed.note()` instead of the prompt; a run answering a task that waited elsewhere restores it too, when
its session is not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
import signal
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from app.protocol.model import Message

from ..approvals import ALLOW_ONCE, ToolCall, decisions, summary, unattended
from ..checkpoints import CheckpointError
from ..events import AgentEvent, AgentEventKind, AgentRun, EventAgent
from ..jail import scratch
from ..jail.egress import EgressProxy, Policy
from ..jail.sandbox import Jail, agent_env, check as jail_check, check_command, principal_home
from ..options import AgentOptions
from ..repos.cache import RepoCache
from ..repos.errors import RepoError
from ..sdk import Request, Skill
from .asking import OpenCalls
from .checkpoint import RunCheckpoints
from .folders import (
    ledger_file,
    load_allowed,
    load_session,
    load_session_data,
    save_allowed,
    save_session,
    workspace,
    workspace_lock,
)
from .process import CliProcess, IdleTimeout, reap_orphans
from .repository import RunRepository, extension, jail_launcher
from .sweep import in_use

if TYPE_CHECKING:
    from .tools import ToolServer

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
"""The global tracer: the server's when tracing is on (`app/telemetry/traces.py` sets it), else a no-op."""

CODING_SKILL = Skill(
    id="coding",
    name="Coding",
    description="Reads, writes and runs code in its workspace: features, fixes, tests, refactors.",
    tags=("coding", "tests", "refactoring"),
    examples=("Add unit tests for src/utils/date.ts",),
)


def coding_skill(name: str, cli: str, tag: str) -> Skill:
    """The coding skill of an adapter whose card names its CLI (`cli`, e.g. "the Codex CLI")."""
    description = f"Reads, writes and tests code in the task's workspace with {cli}."
    return Skill("coding", name, description, tags=("coding", tag), examples=CODING_SKILL.examples)


TURN_ENDS = frozenset({AgentEventKind.DONE, AgentEventKind.ERROR, AgentEventKind.APPROVAL_REQUIRED})
"""The events that end a turn: the checkout's change is published just before them."""
_background: set[asyncio.Task[None]] = set()
APPROVAL_SETTLE_S = 0.5
"""How long a run waits after a permission request for the CLI's next line before it asks the user."""
APPROVAL_GATHER_S = 5.0
"""The longest a run gathers a CLI's lines after a permission request (a CLI that never goes quiet)."""
WAITING = "Waiting for the run of another task in this context's workspace to end"
"""The status of a run whose context's workspace another run holds (`workspace_lock.py`)."""


def approval_decision(message: Message) -> bool:
    """Whether the user's answer allows the pending action (`approvals.decisions`: an approval or older
    data part, else the text y / yes / allow and a few synonyms; anything else denies)."""
    return decisions(message)[0].allows


def exit_reason(binary: str, code: int, stderr: str) -> str:
    """The failure text for a CLI that ended without a result."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    elif code:
        how = f"exited with status {code}"
    else:
        how = "exited without a result"
    return f"{binary} {how}" + (f": {stderr}" if stderr else "")


async def tool_server() -> type[ToolServer]:
    """The run's tool server class. The mcp SDK costs most of a second of CPU to import, so only a run that
    serves tools loads it (not every start of every server), and in a thread: on the event loop, a first run's
    import on a busy machine held it for over a second (1.1 s at a load of 6.5), and a remote worker renews
    its leases from that loop."""
    module = await asyncio.to_thread(importlib.import_module, f"{__package__}.tools")
    server: type[ToolServer] = module.ToolServer
    return server


class CliRun(AgentRun):
    """One turn of a CLI for one task; see the module docstring for the hooks."""

    interruptible = False
    """True when `interrupt()` asks the CLI to stop on its own (tried before SIGTERM)."""
    takes_tools = True
    """The adapter configures its CLI with the run's MCP tool server (`tools.py`) when the run has calls."""

    def __init__(self, request: Request, agent: CliAgent) -> None:
        super().__init__(request)
        self.agent = agent
        self.options = agent.options if request.model is None else agent.options.replace(model=request.model)
        """The role's options, with the model the task chose (`Request.model`) in place of the role's."""
        self.adapter = agent.adapter
        self.workspace = workspace(self.options, request.principal, request.context_id)
        ledger = ledger_file(self.options, request.principal, request.context_id)
        self.repo = RunRepository(agent.repos, agent.cache, self.options, request, self.workspace, ledger)
        self.lock = workspace_lock(self.options, request.principal, request.context_id)
        """One run at a time in the context's workspace (`workspace_lock.py`)."""
        self.proc: CliProcess | None = None
        self.waiting = False
        self._last_activity = 0.0
        self._stopping: asyncio.Task[None] | None = None
        self._reported = False
        """The CLI reported how its run ended (`done` or `error`): stopping it after that is graceful."""
        self.tools: ToolServer | None = None
        """The run's MCP tool server while its CLI runs (`tools.py`), when the server gives it calls."""
        key = (self.options, self.adapter, request.principal, request.context_id)
        self.unattended = unattended(self.options.force, [*request.history, request.message])
        """The CLI skips its permission prompts: the role's `force`, unless the task asked for approvals."""
        self.approvals = OpenCalls(lambda: load_allowed(*key), lambda rules: save_allowed(*key, rules))
        """The permission requests waiting for an answer, and the context's `allow_always` rules."""
        store = getattr(request, "checkpoints", None)
        self.checkpoints: RunCheckpoints | None = None
        """The task's checkpoints (None: the server keeps none, or the run works in AGENT_REPO_PATH, the
        operator's folder, which is not archived nor replaced)."""
        if store is not None and not self.options.repo_path:
            self.checkpoints = RunCheckpoints(store, self, request.principal, request.context_id)
            on_drain = getattr(request, "on_drain", None)
            if on_drain is not None:
                on_drain(self.drain)
        self.note: str | None = None
        """What the CLI is told instead of the prompt: the resumed run's note (`Resumed.note`)."""
        self._prepared = False
        """The workspace is restored and prepared: a checkpoint taken now is the task's."""

    # ---- hooks -----------------------------------------------------------------------------------

    @abstractmethod
    def command(self) -> list[str]:
        """The argv to run."""

    def environment(self) -> dict[str, str]:
        return {}

    async def begin(self) -> None:
        """Runs once the process has started, before reading its output."""

    @abstractmethod
    async def handle(self, obj: dict[str, Any]) -> list[AgentEvent]:
        """One JSON object from the CLI's stdout → the events it means (often none)."""

    async def respond(self, message: Message) -> None:
        """Deliver the user's answer to the CLI: each open permission request it decides goes to `decide`;
        with none open (an adapter that asks in its own way) it is queued for `wait_answer()`."""
        if not self.approvals.open:
            await super().answer(message)
            return
        for opened, option in self.approvals.decide(message):
            await self.decide(opened.handle, opened.call, option)

    async def decide(self, handle: Any, call: ToolCall, option: str) -> None:
        """Answer the CLI's permission request `handle` (given to `ask_permission`) with `option`."""
        raise NotImplementedError(f"{self.adapter} does not ask for permission")

    async def interrupt(self) -> None:
        """Ask the CLI to stop its turn (used only when `interruptible`)."""

    def on_exit(self, code: int) -> list[AgentEvent]:
        assert self.proc is not None
        return [AgentEvent.error(exit_reason(Path(self.proc.argv[0]).name, code, self.proc.stderr_tail()))]

    # ---- the run ---------------------------------------------------------------------------------

    def tools_command(self) -> list[str] | None:
        """The argv of the stdio MCP server that gives the CLI this run's tools (`tools.py`); None when the
        run has none. An adapter puts it in its CLI's MCP configuration as the server `TOOLS_SERVER_NAME`
        (`jail/sandbox.py`)."""
        if self.tools is None:
            return None
        return self.tools.relay(jailed=self.options.sandbox == "bwrap")

    def tools_file(self, name: str, text: str) -> str:
        """A settings file beside the run's tool socket (`ToolServer.write`), as the CLI sees its path."""
        assert self.tools is not None
        return self.tools.write(name, text, jailed=self.options.sandbox == "bwrap")

    def prompt(self) -> str:
        """The user's text for the CLI: the message's text, naming the files attached to it; a resumed
        run's note instead."""
        if self.note is not None:
            return self.note
        return self.repo.prompt(self.request.message.text())

    def session_files(self, home: Path, session_id: str) -> list[Path] | None:
        """The CLI's files (or folders) of the session `session_id` in `home` that a checkpoint carries;
        None: this adapter's sessions are not carried (a restored run starts a new one)."""
        return None

    def session_place(self, rel: PurePosixPath, home: Path) -> PurePosixPath:
        """Where a session file of a checkpoint (its path in the old HOME) goes in this machine's `home`."""
        return rel

    def session_restored(self, home: Path) -> None:
        """After a restore put the session files in `home`: what else the CLI needs to find them there."""

    def session_id(self) -> str | None:
        return load_session(self.options, self.adapter, self.request.principal, self.request.context_id)

    def session_data(self) -> dict[str, Any]:
        """The session an earlier turn left, with what the adapter kept with it (`remember_session`)."""
        r = self.request
        return load_session_data(self.options, self.adapter, r.principal, r.context_id)

    def remember_session(self, session_id: str | None, **extra: Any) -> None:
        if session_id:
            r = self.request
            save_session(self.options, self.adapter, r.principal, r.context_id, session_id, **extra)

    async def ask_permission(self, call: ToolCall, handle: Any) -> list[AgentEvent]:
        """A permission request of the CLI: allowed at once when an earlier `allow_always` of the context
        allows it, else open until answered (the approval_required lists every open call)."""
        if self.approvals.allowed(call):
            await self.decide(handle, call, ALLOW_ONCE)
            return [
                AgentEvent.status(f"Allowed without asking (allow_always): {summary(call.name, call.input)}")
            ]
        self.approvals.add(call, handle)
        question = self.approvals.question()
        return [question] if question is not None else []

    async def answer(self, message: Message) -> None:
        self.waiting = False
        self._touch()
        await self.respond(message)

    def still_asking(self) -> AgentEvent | None:
        question = self.approvals.question()
        if question is not None:
            self.waiting = True
        return question

    def _touch(self) -> None:
        self._last_activity = asyncio.get_running_loop().time()

    async def events(self) -> AsyncIterator[AgentEvent]:
        if self.cancelled:
            return
        lock = self.lock
        try:
            if lock is not None and not lock.take():
                yield AgentEvent.status(WAITING)
                if not await lock.wait(lambda: self.cancelled):
                    return
            async with contextlib.aclosing(self._held()) as turns:
                async for ev in turns:
                    if lock is not None and ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR):
                        await self._shutdown(graceful=True)  # the CLI gone before the next run starts
                        lock.release()
                    yield ev
        finally:
            if lock is not None:
                lock.release()

    async def _held(self) -> AsyncIterator[AgentEvent]:
        """The run, while its workspace is held against the sweep (`sweep.in_use`)."""
        if self.options.repo_path:  # the operator's folder: never swept
            held: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()
        else:
            held = in_use(self.workspace, self.request.principal, self.request.context_id)
        async with held, contextlib.aclosing(self._turn()) as events:
            async for ev in events:
                yield ev

    async def _turn(self) -> AsyncIterator[AgentEvent]:
        """The workspace prepared, then the CLI's events with each turn's change before its end."""
        jail = await self.agent.ready_jail()
        home = principal_home(self.options, self.request.principal)
        git = None if jail is None else jail_launcher(jail.wrap, self.workspace, home)
        refused = await self._restore()
        if refused is not None:
            yield AgentEvent.error(refused)
            return
        try:
            await self.repo.prepare(git)
        except (RepoError, OSError) as exc:
            where = f" on worker {self.options.worker}" if self.options.worker else ""
            yield AgentEvent.error(f"The task's workspace could not be prepared{where}: {exc}")
            return
        self._prepared = True
        async with contextlib.aclosing(self._run()) as events:
            async for ev in events:
                if ev.kind in TURN_ENDS and not self.cancelled:
                    kept = self.repo.checkout is not None or self.checkpoints is not None
                    if ev.kind is not AgentEventKind.APPROVAL_REQUIRED and kept:
                        await self._shutdown(graceful=True)  # its work measured and saved once it stopped
                    if self.repo.checkout is not None:
                        for artifact in await self.repo.turn_end():
                            yield artifact
                    if self.checkpoints is not None and not self.cancelled:
                        await self.checkpoints.save(ev.kind.value)
                yield ev

    async def _restore(self) -> str | None:
        """Restore the task's checkpoint when this run goes on with it (module docstring); the reason the
        run cannot go on, or None. A resumed run never goes on from half a checkpoint."""
        resumed = getattr(self.request, "resumed", None)
        if resumed is None and not self.request.history:
            return None
        if self.checkpoints is None:
            return "cannot resume: the task has no checkpoint" if resumed is not None else None
        try:
            point = await self.checkpoints.store.load()
            if point is None:
                if resumed is not None:
                    return "cannot resume: the task has no checkpoint"
                return None
            adapter = point.manifest.get("adapter")
            if adapter != self.adapter:
                raise CheckpointError(f"it was taken by the {adapter!r} adapter, not {self.adapter!r}")
            if resumed is None:  # an answer: restored only when its session is not here
                sid = point.manifest.get("sessionId")
                if not sid or sid == self.session_id():
                    return None
            restored = await self.checkpoints.restore(point)
        except (CheckpointError, OSError) as exc:
            why = f"the task's checkpoint cannot be used: {exc}"
            if resumed is None:
                log.warning("a %s run goes on without its checkpoint: %s", self.adapter, why)
                return None
            if isinstance(exc, OSError):
                return f"cannot resume: the checkpoint could not be restored here: {exc}"
            return f"cannot resume: {why}"
        log.info("%s run restored its task's checkpoint: %s", self.adapter, restored)
        if resumed is not None:
            self.note = resumed.note()
        return None

    async def _run(self) -> AsyncIterator[AgentEvent]:
        calls = getattr(self.request, "calls", None)
        if calls is not None and self.takes_tools:
            server = await tool_server()
            self.tools = await server(calls, self.workspace).start()
        try:
            async with contextlib.aclosing(self._process()) as events:
                async for ev in events:
                    yield ev
        finally:
            if self.tools is not None:  # `_process` has stopped the CLI: the socket goes after it
                await self.tools.aclose()

    async def _process(self) -> AsyncIterator[AgentEvent]:
        argv = self.command()
        home = principal_home(self.options, self.request.principal)
        env = agent_env(self.options, home, self.environment())
        # A span for the process (a child of the run's, with tracing on), passed to it as TRACEPARENT so a
        # CLI that traces continues the task's trace. Not made current: this generator yields inside it.
        span = _tracer.start_span("cli.process", attributes={"process.executable.name": Path(argv[0]).name})
        context = span.get_span_context()
        if context.is_valid:
            env["TRACEPARENT"] = (
                f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
            )
        proc: CliProcess | None = None
        ticker: asyncio.Task[None] | None = None
        ended = False
        try:
            jail = await self.agent.ready_jail()
            tools = self.tools.folder if self.tools is not None else None
            launcher = None if jail is None else functools.partial(_jailed, jail, self.workspace, home, tools)
            proc = CliProcess(argv, self.workspace, env, owner=self.options.owner or None, launcher=launcher)
            try:
                await proc.start()
            except OSError as exc:
                why = exc.strerror or str(exc)
                what = self.agent.program_setting()
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"cannot start: {why}"))
                proc = None
                yield AgentEvent.error(f"Cannot start {argv[0]!r} ({why}); install it or set {what}")
                return
            self.proc = proc
            if self.checkpoints is not None and self.options.checkpoint_s > 0:
                every = self.checkpoints.every(self.options.checkpoint_s, lambda: self.waiting)
                ticker = asyncio.create_task(every, name=f"cli-checkpoints-{proc.pid}")
            if not self.cancelled:
                async for ev in self._read():
                    yield ev
            ended = True
        finally:
            if ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
            if proc is not None:
                # Graceful (stdin closed, a grace period to exit) only after the run ended on its own: its
                # stream ran out, or the CLI reported its result (the consumer stops reading at `done` or
                # `error`, so this generator is closed at that `yield`); on cancellation or the hard timeout
                # the group is signalled at once.
                await self._shutdown(graceful=ended or self._reported)
                if proc.returncode is not None:
                    span.set_attribute("process.exit.code", proc.returncode)
            span.end()

    async def _read(self) -> AsyncIterator[AgentEvent]:
        assert self.proc is not None
        await self.begin()
        self._touch()
        while True:
            try:
                obj = await self._next()
            except IdleTimeout as idle:
                await self._shutdown(graceful=False)  # a hung CLI gets no grace to exit on its own
                yield AgentEvent.error(str(idle))
                return
            if obj is None:
                break
            self._touch()
            events = await self.handle(obj)
            if any(ev.kind is AgentEventKind.APPROVAL_REQUIRED for ev in events):
                events = await self._gather_requests(events)
            for ev in events:
                if ev.kind is AgentEventKind.APPROVAL_REQUIRED:
                    self.waiting = True
                if ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR) and not self.cancelled:
                    self._reported = True
                yield ev
                if ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR):
                    return
        if not self.cancelled:
            for ev in self.on_exit(await self.proc.wait()):
                yield ev

    async def _gather_requests(self, events: list[AgentEvent]) -> list[AgentEvent]:
        """`events` (which ask) with what the CLI prints within APPROVAL_SETTLE_S of each line after them:
        a CLI asks for parallel tool calls together, and one question lists them all."""
        assert self.proc is not None
        loop = asyncio.get_running_loop()
        until = loop.time() + APPROVAL_GATHER_S
        while not any(ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR) for ev in events):
            try:
                obj = await self.proc.next_message(min(APPROVAL_SETTLE_S, max(until - loop.time(), 0.0)))
            except IdleTimeout:
                break
            if obj is None:  # stdout closed: `_next` says so too
                break
            self._touch()
            events += await self.handle(obj)
        question = self.approvals.question()
        if question is None:
            return events
        rest = [ev for ev in events if ev.kind is not AgentEventKind.APPROVAL_REQUIRED]
        return [*rest, question]

    async def _next(self) -> dict[str, Any] | None:
        """The next stdout object; IdleTimeout after the idle limit, which never runs while waiting."""
        assert self.proc is not None
        idle = self.options.idle_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            left = idle if self.waiting else idle - (loop.time() - self._last_activity)
            try:
                return await self.proc.next_message(max(left, 0.0))
            except IdleTimeout:
                if self.waiting or loop.time() - self._last_activity < idle:
                    continue
                name = Path(self.proc.argv[0]).name
                raise IdleTimeout(
                    f"{name} printed nothing for {idle:g} s ({self.options.where('idle_timeout_s')}) "
                    "and was stopped"
                ) from None

    async def cancel(self) -> None:
        """Stop the CLI (its own interrupt first when it has one); returns once its processes are gone."""
        self.cancelled = True
        await self._shutdown(graceful=False)

    async def drain(self) -> bool:
        """The server shuts down cleanly (`TaskContext.on_drain`): stop the CLI (its own interrupt first)
        without a word to the task, then save the checkpoint; True when saved."""
        self.cancelled = True
        await self._shutdown(graceful=False)
        if self.checkpoints is None or not self._prepared:
            return False  # a run not yet restored and prepared: the task's checkpoint stays as it was
        return await self.checkpoints.save("drain")

    async def _shutdown(self, graceful: bool) -> None:
        """Stop the process once, in a task of its own, so a cancelled caller cannot leave it half done."""
        if self.proc is None:
            return
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop(graceful), name=f"cli-stop-{self.proc.pid}")
            _background.add(self._stopping)
            self._stopping.add_done_callback(_background.discard)
        await asyncio.shield(self._stopping)

    async def _stop(self, graceful: bool) -> None:
        assert self.proc is not None
        grace = self.options.cancel_grace_s
        if graceful and self.proc.returncode is None:
            await self.proc.close_stdin()
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except TimeoutError:
                pass
        hook = self.interrupt if self.interruptible and not graceful else None
        await self.proc.stop(grace, hook)


def _jailed(
    jail: Jail, workspace: Path, home: Path, tools: Path | None, argv: list[str], env: Mapping[str, str]
) -> list[str]:
    workspace.mkdir(parents=True, exist_ok=True)
    return jail.wrap(argv, workspace, home, env, tools=tools)


class CliAgent(EventAgent):
    """An agent backed by a CLI, run with the `AgentOptions` it is given (the loader passes the ones the
    app builds from its settings, or a role's); it never reads the server's settings.

    Construction fails (SettingError, one line) when AGENT_SANDBOX=bwrap and bubblewrap cannot run here, or
    when the jail hides what the CLI's program needs (`jail.check_command`).
    """

    adapter = "cli"
    input_modes: Sequence[str] = ("text/plain", "*/*")
    """Text, and files of any type (written under the workspace's `attachments/`, the prompt names them)."""
    skills: Sequence[Skill] = (CODING_SKILL,)
    """What a coding CLI offers; an adapter whose card names its CLI, or no coding CLI, sets its own."""
    run_class: type[CliRun]
    """What `start` runs for a task: the adapter's `CliRun` subclass."""
    bin_field: str | None = None
    """The `AgentOptions` field (`claude_bin`, ...) of the CLI's executable when the role sets no `bin`."""
    program_field = "bin"
    """The `AgentOptions` field that sets what runs (`command` for the `ndjson` adapter)."""

    def __init__(self, options: AgentOptions) -> None:
        self.options = options
        self.name = f"coding-agent-a2a ({self.adapter})"
        jail_check(options)
        self.check_program()
        self.egress: EgressProxy | None = None
        self.jail: Jail | None = None
        self._jail_lock = asyncio.Lock()
        self.repos = options.repos
        """What repository and files a task may bring (the edge checks a message with it first)."""
        self.cache = RepoCache(Path(options.repo_cache_root), timeout_s=options.repo_git_timeout_s)
        if self.repos.takes_repositories:
            self.extensions = (extension(options),)

    @property
    def binary(self) -> str:
        """The CLI's executable: the role's `bin`, else the adapter's `*_BIN` setting."""
        default = getattr(self.options, self.bin_field) if self.bin_field else ""
        return self.options.bin or default

    def program(self) -> list[str]:
        """The start of every argv this adapter runs (what the start-up check follows)."""
        return [self.binary]

    def program_setting(self) -> str:
        """Where the program is set, for messages: CLAUDE_BIN, AGENT_COMMAND, or the role's field."""
        return self.options.where(self.program_field, self._setting())

    def _setting(self) -> str | None:
        """The server-wide setting of `bin` (the adapter's `*_BIN`); None for a field with its own."""
        return self.bin_field.upper() if self.program_field == "bin" and self.bin_field else None

    def check_program(self) -> None:
        """SettingError at start-up when the program cannot run where it will (see `jail.check_command`)."""
        path = agent_env(self.options, Path(os.devnull), {}).get("PATH")
        check_command(self.program(), path, self.options, self.program_field, self._setting())

    def start(self, request: Request) -> AgentRun:
        return self.run_class(request, self)

    async def setup(self) -> None:
        """Start the jail's egress proxy, and kill the CLIs a killed previous life of this replica left
        running: their tasks are ended as lost by the runner, so nothing may go on working in their
        workspaces. Then remove the socket folders killed servers left (`jail/scratch.py`): housekeeping,
        so its failure is logged and never stops the start."""
        await self.ready_jail()
        owner = self.options.owner
        left = await asyncio.to_thread(reap_orphans, owner) if owner else 0
        if left:
            log.warning("killed %d process(es) a previous run of %s left", left, owner)
        try:
            swept = await asyncio.to_thread(scratch.sweep)
        except Exception:
            log.warning("could not sweep the scratch folders killed servers left", exc_info=True)
        else:
            if swept:
                log.info("removed %d scratch folder(s) killed servers left", swept)

    async def ready_jail(self) -> Jail | None:
        """The jail runs are started in (None with AGENT_SANDBOX=none); its proxy is started on first use,
        so a run never goes unjailed because `setup()` was not called."""
        o = self.options
        async with self._jail_lock:
            if o.sandbox == "bwrap" and self.jail is None:
                if o.network == "egress":
                    self.egress = EgressProxy(Policy(o.allowed))
                    await self.egress.start()
                self.jail = Jail(o, self.egress.path if self.egress else None)
        return self.jail

    async def aclose(self) -> None:
        if self.egress is not None:
            await self.egress.aclose()
