"""The agent API: what your own agent implements to be served over A2A, in both protocol versions.

Subclass `Agent`, implement `run(task)`, and start the server with
`AGENT_ADAPTER=package.module:YourAgent` (a class, a factory, or an instance; `AGENT_OPTIONS` JSON is
passed to it as keyword arguments). The server handles the wire versions, persistence, fan-out to
every replica and push; the agent only reads its `TaskContext` and calls its methods:

    class Greeter(Agent):
        name = "Greeter"
        skills = (Skill("greet", "Greet", "Says hello"),)

        async def run(self, task: TaskContext) -> None:
            await task.say(f"Hello, {task.text}!")   # streamed into the `assistant-response` artifact
            answer = await task.ask("Anything else?")  # input-required; the user's next message
            await task.complete(f"Bye ({answer.text()})", usage=Usage.of("my-model", input_tokens=12))

Returning from `run` completes the task; raising fails it with the exception's text. Once the task is
cancelled, `cancelled` is true, emissions are discarded (never applied) and raise CancelledError, and the
run's coroutine is cancelled too, so a cancelled agent stops at its next `await`. Emissions after the agent
itself ended the task are discarded.

What a run uses (tokens per model, cost, turns) is reported with `usage=` on the call that ends or pauses its
turn (`complete`, `fail`, `ask`, ...), or at any time with `usage()`; the server adds the run's wall time and
the tool calls announced with `tool_call()` when the report leaves them out, prices tokens whose cost the
report does not give (the price table), records each report and sums them in the task's metadata
(`metadata.usage`).

On a deployment of several roles a run may hand work to another role's agent: `list_agents`,
`send_to_agent`, `get_task`, `answer_task` and `cancel_task` (through `TaskContext.calls`, the server's;
`CallError` when it refuses, or gives this run none).

An agent's author imports from this module alone: what an agent uses is defined or re-exported here, a
facade over the modules it lives in (`Message`, `Part`, `Usage`, `ModelUsage` from the domain model;
`RESPONSE_ARTIFACT` from `emissions.py`, which holds the internals of `TaskContext`'s events: the usage
meter, a tool call's metadata, the response artifact's id).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.protocol.events import ArtifactUpdate, Event, StatusUpdate, status_update
from app.protocol.model import SESSION_KEY, Artifact, Message, Part, Role, TaskState, new_id
from app.protocol.usage import CHILD_USAGE_KEY, USAGE_KEY, ModelUsage, Usage

from .calls import AgentCalls, AgentInfo, CallError, ChildTask
from .checkpoints import CheckpointStore, Resumed
from .emissions import RESPONSE_ARTIFACT, Emit, Price, UsageMeter, response_artifact_id, tool_call_metadata

__all__ = [
    "RESPONSE_ARTIFACT",
    "Agent",
    "AgentInfo",
    "CallError",
    "ChildTask",
    "Extension",
    "Message",
    "ModelUsage",
    "Part",
    "Request",
    "Skill",
    "TaskContext",
    "Usage",
    "data_part",
    "file_part",
    "text_part",
    "url_part",
]


def text_part(text: str, metadata: dict[str, Any] | None = None) -> Part:
    return Part(text=text, metadata=metadata)


def file_part(
    content: bytes, media_type: str, name: str | None = None, metadata: dict[str, Any] | None = None
) -> Part:
    """A file sent inline (base64 on the wire)."""
    return Part(raw=content, media_type=media_type, filename=name, metadata=metadata)


def url_part(
    url: str, media_type: str | None = None, name: str | None = None, metadata: dict[str, Any] | None = None
) -> Part:
    """A file sent by reference: the client fetches `url` itself."""
    return Part(url=url, media_type=media_type, filename=name, metadata=metadata)


def data_part(data: Any, metadata: dict[str, Any] | None = None) -> Part:
    """Structured JSON data."""
    return Part(data=data, media_type="application/json", metadata=metadata)


@dataclass(slots=True, frozen=True)
class Skill:
    """One skill on the agent card. Empty modes mean the agent's defaults."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class Extension:
    """An A2A extension the agent card declares (`capabilities.extensions`).

    `required`: a request that does not name it in `A2A-Extensions` is refused (-32008) before the agent
    sees it. `params`: the extension's own configuration, a JSON object, printed on the card as given.
    """

    uri: str
    description: str = ""
    required: bool = False
    params: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Request:
    """What the caller sent, whatever the wire version: the message, its context and who sent it."""

    message: Message
    context_id: str
    principal: str
    task_id: str | None = None
    history: list[Message] = field(default_factory=list)
    """Earlier messages of this task, oldest first (the new `message` is not included)."""
    extensions: tuple[str, ...] = ()
    """Extension URIs the caller requested (the `A2A-Extensions` header) or the message declares."""
    active_extensions: tuple[str, ...] = ()
    """The extensions the server activated for this request: those the caller requested (the
    `A2A-Extensions` header) that the agent card declares (`Agent.extensions`, `CARD_EXTENSIONS`), echoed
    to the caller in the response. A card's required extensions are always among them."""
    model: str | None = None
    """The model the task chose among its role's `models` (`metadata.model`, kept by the task for every
    turn); None: the role's own. A CLI adapter passes it to its CLI (`--model`)."""

    @property
    def text(self) -> str:
        """The text parts of the message, joined by newlines."""
        return self.message.text()

    @property
    def parts(self) -> list[Part]:
        return self.message.parts

    @property
    def files(self) -> list[Part]:
        """File parts: `raw` bytes or a `url`, with `media_type` and `filename` when the client gave them."""
        return [p for p in self.message.parts if p.kind == "file"]

    @property
    def data(self) -> list[Any]:
        """The payloads of the data parts."""
        return [p.data for p in self.message.parts if p.kind == "data"]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.message.metadata or {}

    def agent_message(self, text: str | None = None, *, parts: Sequence[Part] = ()) -> Message:
        """A message from the agent in this context: what `Agent.reply` returns."""
        return Message(
            message_id=new_id(),
            role=Role.AGENT,
            parts=([Part(text=text)] if text else []) + list(parts),
            context_id=self.context_id,
            task_id=self.task_id,
        )


class TaskContext(Request):
    """A running task as its agent sees it: the request, plus everything the agent may say.

    Every method is a coroutine that hands events to the server; they are committed and streamed in
    order, several at a time when the agent is faster than the database.
    """

    __slots__ = (
        "_answers",
        "_cancel_hooks",
        "_cancelled",
        "_drain_hooks",
        "_emit",
        "_finished",
        "_meter",
        "_response_started",
        "_turn_end_hooks",
        "attachments",
        "calls",
        "checkpoints",
        "resumed",
        "workspace",
    )

    def __init__(
        self,
        request: Request,
        task_id: str,
        emit: Emit,
        response_started: bool = False,
        price: Price | None = None,
    ) -> None:
        super().__init__(
            message=request.message,
            context_id=request.context_id,
            principal=request.principal,
            task_id=task_id,
            history=request.history,
            extensions=request.extensions,
            active_extensions=request.active_extensions,
            model=request.model,
        )
        self._emit = emit
        self._answers: asyncio.Queue[Message] = asyncio.Queue()
        self._cancelled = asyncio.Event()
        self._cancel_hooks: list[Callable[[], Awaitable[None]]] = []
        self._finished = False
        self._response_started = response_started
        self._meter = UsageMeter(price)
        self._turn_end_hooks: list[Callable[[], Awaitable[None]]] = []
        self.workspace: Path | None = None
        """The context's folder, for an agent that declares `workspace = True` (`Agent.workspace`): a
        checkout of the task's repository on its branch when the message names one (or the role has a
        default, or an earlier task of the context made one), else a plain folder; None otherwise."""
        self.attachments: list[Path] = []
        """The message's inline files, written under `workspace / "attachments"` (a workspace agent's)."""
        self.calls: AgentCalls | None = None
        """What this run may ask of the server about other agents (set by the server; None: it gives
        none). The methods `list_agents` ... `cancel_task` below call it."""
        self.checkpoints: CheckpointStore | None = None
        """Where this run saves its task's checkpoint and finds the one a previous holder saved
        (`checkpoints.py`; set by the server, None: it keeps none)."""
        self.resumed: Resumed | None = None
        """Set when this run goes on with a task whose previous holder stopped: restore the checkpoint."""
        self._drain_hooks: list[Callable[[], Awaitable[bool]]] = []

    @property
    def id(self) -> str:
        assert self.task_id is not None
        return self.task_id

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def finished(self) -> bool:
        """True once the agent completed, failed or rejected the task, or it was cancelled."""
        return self._finished or self.cancelled

    async def wait_cancelled(self) -> None:
        """Return when the task is cancelled: race it against long work that has no `await` points."""
        await self._cancelled.wait()

    def on_cancel(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook` when the task is cancelled or times out, before the run's coroutine is cancelled
        (a process-owning agent stops its process here; the cancel call waits for it)."""
        self._cancel_hooks.append(hook)

    def on_drain(self, hook: Callable[[], Awaitable[bool]]) -> None:
        """Run `hook` when the server shuts down cleanly while the task works: it stops the agent and
        saves a checkpoint, True when it saved one (the task then goes on elsewhere)."""
        self._drain_hooks.append(hook)

    async def drain(self) -> bool:
        """The server is shutting down: stop the agent keeping its work (`on_drain`); True when a
        checkpoint was saved. Later emissions are dropped, as after a cancel."""
        if self._cancelled.is_set() or not self._drain_hooks:
            return False
        self._cancelled.set()
        saved = False
        for hook in self._drain_hooks:
            saved = await hook() or saved
        return saved

    def on_turn_end(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook` just before each end of the agent's turn (`ask`, `ask_auth`, `complete`, `fail`,
        `reject`), while it may still emit: a workspace agent's change is published there."""
        self._turn_end_hooks.append(hook)

    # ---- output -------------------------------------------------------------------------------

    async def say(self, text: str) -> None:
        """Append text to the task's `assistant-response` artifact (streamed as chunks)."""
        append = self._response_started
        self._response_started = True
        art = Artifact(
            artifact_id=response_artifact_id(self.id),
            parts=[Part(text=text)],
            name=None if append else RESPONSE_ARTIFACT,
        )
        await self._send([self._artifact_update(art, append=append)])

    async def artifact(
        self,
        parts: Sequence[Part],
        *,
        artifact_id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
        append: bool = False,
        last_chunk: bool = False,
    ) -> str:
        """Emit an artifact, or a chunk of one: give the first chunk's id back with `append=True`
        for the next chunks, and `last_chunk=True` on the final one. Returns the artifact id."""
        art = Artifact(
            artifact_id=artifact_id or new_id(),
            parts=list(parts),
            name=name,
            description=description,
            metadata=metadata,
        )
        await self._send([self._artifact_update(art, append=append, last_chunk=last_chunk)])
        return art.artifact_id

    async def working(
        self, text: str | None = None, *, parts: Sequence[Part] = (), usage: Usage | None = None
    ) -> None:
        """A progress note: status `working` with a message from the agent."""
        await self._send([self._status(TaskState.WORKING, text, parts, usage)])

    async def tool_call(self, name: str, tool_input: Any = None) -> None:
        """Announce a tool call: status `working` with the message `Using tool: <name>`, whose metadata
        carries the call (`{"toolCall": {"name", "input"}}`, see `tool_call_metadata`); counted in the
        run's usage."""
        ev = self._status(TaskState.WORKING, f"Using tool: {name}")
        assert ev.status.message is not None
        ev.status.message.metadata = tool_call_metadata(name, tool_input)
        self._meter.tool_called()
        await self._send([ev])

    async def session(self, **info: str) -> None:
        """Say what this run is (e.g. `model=`, `sessionId=`, strings): a status `working` whose metadata
        carries it, kept in the task's `metadata.session`. Never an artifact: clients and agent frameworks
        show a task's artifacts as the agent's answer."""
        ev = self._status(TaskState.WORKING, None)
        ev.metadata = {SESSION_KEY: dict(info)}
        await self._send([ev])

    async def usage(self, usage: Usage) -> None:
        """Report what the run used since its start or its last report, now (a status-update `working`
        carrying it). When the turn ends or pauses anyway, pass `usage=` to that call instead."""
        await self._send([self._status(TaskState.WORKING, None, (), usage)])

    async def ask(
        self, text: str | None = None, *, parts: Sequence[Part] = (), usage: Usage | None = None
    ) -> Message:
        """Ask the user (status `input-required`) and return their next message on this task."""
        return await self._interrupt(TaskState.INPUT_REQUIRED, text, parts, usage)

    async def ask_auth(
        self, text: str | None = None, *, parts: Sequence[Part] = (), usage: Usage | None = None
    ) -> Message:
        """Ask for authentication (status `auth-required`) and return the user's next message."""
        return await self._interrupt(TaskState.AUTH_REQUIRED, text, parts, usage)

    async def complete(
        self, text: str | None = None, *, parts: Sequence[Part] = (), usage: Usage | None = None
    ) -> None:
        """End the task `completed`, with an optional final message."""
        await self._finish(TaskState.COMPLETED, text, parts, usage)

    async def fail(self, text: str, *, parts: Sequence[Part] = (), usage: Usage | None = None) -> None:
        """End the task `failed` with the reason."""
        await self._finish(TaskState.FAILED, text, parts, usage)

    async def reject(self, text: str, *, parts: Sequence[Part] = (), usage: Usage | None = None) -> None:
        """Refuse the task (status `rejected`)."""
        await self._finish(TaskState.REJECTED, text, parts, usage)

    # ---- other agents -------------------------------------------------------------------------------

    async def list_agents(self) -> Sequence[AgentInfo]:
        """The deployment's roles: their cards' names, descriptions and skills, and whether each runs now."""
        return await self._calls().list_agents()

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask:
        """Start a task on `role` (a child of this one, in a context of its own, as this task's principal)
        and, with `wait`, wait until it ends or asks (AGENT_CALL_WAIT_S at most: then it comes back
        `working`; poll it with `get_task`). A refusal (no such role, too deep, a loop) is a CallError."""
        return await self._calls().send_to_agent(role, text, files, wait)

    async def get_task(self, task_id: str) -> ChildTask:
        """A task this run started, as it stands."""
        return await self._calls().get_task(task_id)

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask:
        """Answer the question of a task this run started (`input-required`); waits as `send_to_agent`."""
        return await self._calls().answer_task(task_id, text, wait)

    async def cancel_task(self, task_id: str) -> ChildTask:
        """Cancel a task this run started (and the tasks it started in turn)."""
        return await self._calls().cancel_task(task_id)

    def _calls(self) -> AgentCalls:
        if self.calls is None:
            raise CallError("This server gives this run no calls to other agents")
        return self.calls

    # ---- what the server calls ------------------------------------------------------------------

    def deliver(self, message: Message) -> None:
        """The user's answer to `ask`/`ask_auth`."""
        self._answers.put_nowait(message)

    async def record_child(self, task_id: str, usage: Mapping[str, Any]) -> None:
        """Add an ended child's usage summary to this task's `metadata.usage.children` (once per child: the
        step counts it by its id), in a status `working`; no usage report of this run's."""
        ev = self._status(TaskState.WORKING, None)
        ev.metadata = {CHILD_USAGE_KEY: {"taskId": task_id, USAGE_KEY: dict(usage)}}
        await self._send([ev])

    async def cancel(self) -> None:
        """Mark the task cancelled and run the agent's cancel hooks; later emissions are dropped."""
        if self._cancelled.is_set():
            return
        self._cancelled.set()
        for hook in self._cancel_hooks:
            await hook()

    # ---- internals ------------------------------------------------------------------------------

    async def _send(self, events: list[Event]) -> None:
        """Hand events to the server; after the task ended they are dropped, and after a cancel the
        emission raises CancelledError so a loop that only emits still stops."""
        if self.cancelled:
            raise asyncio.CancelledError("the task was cancelled")
        if self._finished:
            await asyncio.sleep(0)
            return
        await self._emit(events)

    async def _interrupt(
        self, state: TaskState, text: str | None, parts: Sequence[Part], usage: Usage | None
    ) -> Message:
        if self._turn_end_hooks:
            await self._turn_ended()
        status = self._status(state, text, parts, usage)
        with self._meter.waiting():
            await self._send([status])
            return await self._answers.get()

    async def _finish(
        self, state: TaskState, text: str | None, parts: Sequence[Part], usage: Usage | None
    ) -> None:
        if self._turn_end_hooks:
            await self._turn_ended()
        events: list[Event] = []
        if state is TaskState.COMPLETED and self._response_started:
            closing = Artifact(artifact_id=response_artifact_id(self.id), parts=[Part(text="")])
            events.append(self._artifact_update(closing, append=True, last_chunk=True))
        events.append(self._status(state, text, parts, usage))
        await self._send(events)
        self._finished = True

    async def _turn_ended(self) -> None:
        if not self.finished:
            for hook in self._turn_end_hooks:
                await hook()

    def _status(
        self, state: TaskState, text: str | None, parts: Sequence[Part] = (), usage: Usage | None = None
    ) -> StatusUpdate:
        ev = status_update(self.id, self.context_id, state, text or None, parts)
        if usage is not None:
            ev.metadata = {USAGE_KEY: self._meter.report(usage).to_wire()}
        return ev

    def _artifact_update(
        self, art: Artifact, append: bool = False, last_chunk: bool = False
    ) -> ArtifactUpdate:
        return ArtifactUpdate(self.id, self.context_id, art, append=append, last_chunk=last_chunk)


class WorkspaceHost(Protocol):
    """What runs a workspace agent's tasks (`workspace.Workspaces`; named here without importing it)."""

    async def serve(self, agent: Agent, task: TaskContext) -> None: ...


class Agent(ABC):
    """An agent the server can run. One instance serves every task; per-task state lives in `run`.

    The class attributes build the agent card. `input_modes` are the media types the agent accepts:
    a message part declaring any other type is refused with ContentTypeNotSupported (-32005) before
    the agent runs.
    """

    name: str = "agent"
    description: str = ""
    skills: Sequence[Skill] = ()
    input_modes: Sequence[str] = ("text/plain",)
    output_modes: Sequence[str] = ("text/plain",)
    extensions: Sequence[Extension] = ()
    """The A2A extensions the agent supports, declared on its card (with `CARD_EXTENSIONS`, which wins
    for the same URI); the ones a request activates reach `run` as `TaskContext.active_extensions`."""

    workspace: bool = False
    """The agent works on files, as the coding CLIs do: each task gets its context's folder
    (`TaskContext.workspace`), a checkout of the repository the message names (`metadata.repository`, as
    REPO_ALLOW allows) or of the role's default, the message's inline files written there
    (`TaskContext.attachments`), and each end of a turn publishes the change as artifacts (`workspace.py`).
    False: none of it, and a message naming a repository is refused."""
    workspaces: WorkspaceHost | None = None
    """What runs its tasks in their workspaces (`workspace.Workspaces`, with the role's rules), set by the
    server when it loads an agent with `workspace`; not the agent's to set."""

    pure: bool = False
    """The agent has no effects beyond the events it emits (it computes its answer in process, touches
    no files and calls no paid service). A blocking send then starts its run before the new task is
    committed, and the task's creation commits with the run's first step: one transaction instead of two
    for an agent that answers at once. If that commit fails (a concurrent copy of the request stored first,
    or the database is away) the run is dropped; a run slower than a moment commits the task alone first."""

    @abstractmethod
    async def run(self, task: TaskContext) -> None:
        """Do the task. Called again with the full history if the server restarts while it waits."""

    async def reply(self, request: Request) -> Message | None:
        """Answer a new message directly with a Message and create no task; None (the default) makes
        a task and calls `run`. Not called for messages that continue an existing task."""
        return None

    async def setup(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Prepare once at server start, before any task runs here."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release what the agent holds when the server stops."""
