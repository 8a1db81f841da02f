"""Agents as event streams: the convenience layer the CLI adapters are written in, on `sdk`.

An `EventAgent` starts one `AgentRun` per task. A run yields `AgentEvent`s; after it yields
`approval_required` it waits for the user's answer, which arrives through `answer()`. `cancel()` asks the
run to stop (a CLI adapter terminates its process group). Each event becomes `TaskContext` calls:

| AgentEvent        | TaskContext call → A2A events                                               |
|-------------------|-----------------------------------------------------------------------------|
| init              | `session(model, sessionId)`: status working, kept in the task's metadata    |
| thinking          | `say`: artifact `assistant-response`, one id per task, chunks appended      |
| tool_use          | `tool_call(name, input)`: status working "Using tool: <name>" (+ the call)  |
| tool_result       | `working(<output truncated to 200 characters>)`                             |
| status            | `working(text)`: a progress note (a run waiting for its workspace)          |
| approval_required | `ask(question)`: status input-required (with tool calls: their approval data |
|                   | part); the answer goes to `run.answer`, asked again while `still_asking`   |
| usage             | `usage(report)`: status working carrying what the run used so far           |
| artifact          | `artifact(parts, artifact_id, name)`: a whole artifact (a turn's diff)      |
| done              | artifact `result` with summary/stats when present; `complete(usage=...)`    |
| error             | `fail(text, usage=...)`                                                     |

`done` and `error` carry the run's usage (`AgentEvent.usage`) when the adapter knows it: each CLI adapter
maps what its CLI reports into a `Usage` (tokens per model, the cost when the CLI gives one, its turns); the
server adds the wall time and the tool calls counted from `tool_use`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.protocol.model import Message
from app.protocol.usage import Usage

from .approvals import ToolCall, question_data
from .sdk import Agent, Part, Request, TaskContext, data_part

TOOL_RESULT_LIMIT = 200
RESULT_ARTIFACT = "result"


class AgentEventKind(StrEnum):
    INIT = "init"
    THINKING = "thinking"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    STATUS = "status"
    APPROVAL_REQUIRED = "approval_required"
    USAGE = "usage"
    ARTIFACT = "artifact"
    DONE = "done"
    ERROR = "error"


@dataclass(slots=True)
class AgentEvent:
    """One step of an agent's work. Which fields matter depends on `kind`."""

    kind: AgentEventKind
    text: str = ""
    tool_name: str | None = None
    tool_input: Any = None
    model: str | None = None
    session_id: str | None = None
    summary: str | None = None
    stats: dict[str, Any] | None = None
    usage: Usage | None = None
    """What the run used (`usage`, `done`, `error`)."""
    parts: list[Part] | None = None
    """An artifact's parts (`artifact`)."""
    artifact_id: str | None = None
    """The artifact's id (`artifact`): the same id again replaces it."""

    @classmethod
    def init(cls, model: str | None = None, session_id: str | None = None) -> AgentEvent:
        return cls(AgentEventKind.INIT, model=model, session_id=session_id)

    @classmethod
    def thinking(cls, text: str) -> AgentEvent:
        return cls(AgentEventKind.THINKING, text=text)

    @classmethod
    def tool_use(cls, name: str, tool_input: Any = None) -> AgentEvent:
        return cls(AgentEventKind.TOOL_USE, tool_name=name, tool_input=tool_input)

    @classmethod
    def tool_result(cls, output: str, name: str | None = None) -> AgentEvent:
        return cls(AgentEventKind.TOOL_RESULT, text=output, tool_name=name)

    @classmethod
    def status(cls, text: str) -> AgentEvent:
        """A progress note: status working with `text`, nothing added to the response."""
        return cls(AgentEventKind.STATUS, text=text)

    @classmethod
    def approval_required(cls, question: str, calls: Sequence[ToolCall] = ()) -> AgentEvent:
        """Ask the user; with `calls` (tool permission requests) the question carries their approval data
        part (`approvals.py`) beside its text."""
        parts = [data_part(question_data(calls))] if calls else None
        return cls(AgentEventKind.APPROVAL_REQUIRED, text=question, parts=parts)

    @classmethod
    def usage_report(cls, usage: Usage) -> AgentEvent:
        """What the run used since its start or its last report, reported before the run ends."""
        return cls(AgentEventKind.USAGE, usage=usage)

    @classmethod
    def artifact(cls, parts: list[Part], artifact_id: str, name: str | None = None) -> AgentEvent:
        """A whole artifact (`text`: its name); an artifact of the same id replaces it."""
        return cls(AgentEventKind.ARTIFACT, text=name or "", parts=parts, artifact_id=artifact_id)

    @classmethod
    def done(
        cls, summary: str | None = None, stats: dict[str, Any] | None = None, usage: Usage | None = None
    ) -> AgentEvent:
        return cls(AgentEventKind.DONE, summary=summary, stats=stats, usage=usage)

    @classmethod
    def error(cls, text: str, usage: Usage | None = None) -> AgentEvent:
        return cls(AgentEventKind.ERROR, text=text, usage=usage)


class AgentRun(ABC):
    """One run of an agent for one task.

    Subclasses implement `events()`. The default `answer()` queues the user's reply for
    `wait_answer()`; the default `cancel()` only records the request, because the server also cancels
    the coroutine iterating `events()`. Adapters that own a process override `cancel()` to stop it.
    """

    def __init__(self, request: Request) -> None:
        self.request = request
        self.cancelled = False
        self._answers: asyncio.Queue[Message] = asyncio.Queue()

    @abstractmethod
    def events(self) -> AsyncIterator[AgentEvent]:
        """Yield the run's events; end after `done` or `error`."""

    async def answer(self, message: Message) -> None:
        await self._answers.put(message)

    async def wait_answer(self) -> Message:
        return await self._answers.get()

    def still_asking(self) -> AgentEvent | None:
        """After an answer: the approval_required of what it left undecided (None: nothing)."""
        return None

    async def cancel(self) -> None:
        self.cancelled = True


class EventAgent(Agent):
    """An agent written as a stream of `AgentEvent`s (the CLI adapters' layer), run on the agent API.

    Subclasses implement `start()`; `run()` maps each event to `TaskContext` calls by the table in
    this module's docstring, so event-based and SDK agents share one path to A2A.
    """

    @abstractmethod
    def start(self, request: Request) -> AgentRun:
        """Begin a run for a task (`request.task_id` is set). Called again with the full history after a
        restart."""

    async def run(self, task: TaskContext) -> None:
        run = self.start(task)
        task.on_cancel(run.cancel)
        async for ev in run.events():
            if await _apply(task, run, ev):
                return
        await task.fail("The agent stopped without reporting a result.")


async def _apply(task: TaskContext, run: AgentRun, ev: AgentEvent) -> bool:
    """Say one event through the task context; True once the task has ended."""
    kind = ev.kind
    if kind is AgentEventKind.THINKING:
        await task.say(ev.text)
    elif kind is AgentEventKind.INIT:
        info = {k: v for k, v in (("model", ev.model), ("sessionId", ev.session_id)) if v}
        if info:
            await task.session(**info)
        else:
            await task.working()
    elif kind is AgentEventKind.TOOL_USE:
        await task.tool_call(str(ev.tool_name), ev.tool_input)
    elif kind is AgentEventKind.TOOL_RESULT:
        await task.working(truncate(ev.text))
    elif kind is AgentEventKind.STATUS:
        await task.working(ev.text)
    elif kind is AgentEventKind.APPROVAL_REQUIRED:
        asking: AgentEvent | None = ev
        while asking is not None:  # one answer may leave calls open: they are asked again
            await run.answer(await task.ask(asking.text, parts=asking.parts or ()))
            asking = run.still_asking()
    elif kind is AgentEventKind.USAGE:
        if ev.usage is not None:
            await task.usage(ev.usage)
    elif kind is AgentEventKind.ARTIFACT:
        await task.artifact(ev.parts or [], artifact_id=ev.artifact_id, name=ev.text or None, last_chunk=True)
    elif kind is AgentEventKind.ERROR:
        await task.fail(ev.text or "The agent reported an error", usage=ev.usage)
        return True
    else:
        if ev.summary is not None or ev.stats:
            data = {"summary": ev.summary, "stats": ev.stats or {}}
            await task.artifact([data_part(data)], name=RESULT_ARTIFACT, last_chunk=True)
        await task.complete(usage=ev.usage)
        return True
    return False


def truncate(text: str, limit: int = TOOL_RESULT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def as_text(value: Any) -> str:
    """A field of a CLI's JSON as event text: a string as it is, anything else (absent, null) empty."""
    return value if isinstance(value, str) else ""


def count(value: Any) -> int:
    """A count from a CLI's JSON (tokens, turns): a non-negative whole number, anything else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        return 0
    return int(value) if value < 10**15 else 10**15
