"""The agent API: what an adapter implements. Agents know nothing of A2A.

An `Agent` describes itself (name, skills, modes) and starts one `AgentRun` per task. A run yields
`AgentEvent`s; after it yields `approval_required` it waits for the user's answer, which the server
delivers with `answer()`. `cancel()` asks the run to stop (a CLI adapter terminates its process).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.protocol.model import Message


class AgentEventKind(StrEnum):
    INIT = "init"
    THINKING = "thinking"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    APPROVAL_REQUIRED = "approval_required"
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
    def approval_required(cls, question: str) -> AgentEvent:
        return cls(AgentEventKind.APPROVAL_REQUIRED, text=question)

    @classmethod
    def done(cls, summary: str | None = None, stats: dict[str, Any] | None = None) -> AgentEvent:
        return cls(AgentEventKind.DONE, summary=summary, stats=stats)

    @classmethod
    def error(cls, text: str) -> AgentEvent:
        return cls(AgentEventKind.ERROR, text=text)


@dataclass(slots=True)
class AgentRequest:
    """What a run is asked to do: the new message, with the task's earlier history for context."""

    task_id: str
    context_id: str
    message: Message
    history: list[Message] = field(default_factory=list)


class AgentRun(ABC):
    """One run of an agent for one task.

    Subclasses implement `events()`. The default `answer()` queues the user's reply for
    `wait_answer()`; the default `cancel()` only records the request, because the server also cancels
    the coroutine iterating `events()`. Adapters that own a process override `cancel()` to stop it.
    """

    def __init__(self, request: AgentRequest) -> None:
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

    async def cancel(self) -> None:
        self.cancelled = True


@dataclass(slots=True, frozen=True)
class Skill:
    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


class Agent(ABC):
    """An agent the server can run. One instance serves every task; state lives in the runs."""

    name: str = "agent"
    description: str = ""
    skills: tuple[Skill, ...] = ()
    input_modes: tuple[str, ...] = ("text/plain",)
    output_modes: tuple[str, ...] = ("text/plain",)

    @abstractmethod
    def start(self, request: AgentRequest) -> AgentRun:
        """Begin a run for a task. Called again with the full history after a restart."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release what the agent holds when the server stops."""
