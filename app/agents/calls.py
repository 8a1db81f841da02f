"""What a running agent may ask of its server about other agents: the calls behind the MCP tools a CLI gets in
its jail (`list_agents`, `send_to_agent`, `get_task`, `answer_task`, `cancel_task`) and behind the same
methods of a Python agent's `TaskContext`.

A run gets one `AgentCalls`, bound to its task (the parent): every task it starts is a child of that task,
owned by the same principal, in a context of its own; it reads, answers and cancels only its own children.
The server gives a replica's runs a local one and a remote worker's runs one that asks the server over the
worker API; the agent never holds a key of its principal. A refused call raises `CallError`, whose text the
agent is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.protocol.model import DEPTH_KEY, INTERRUPTED_STATES, PARENT_KEY, PATH_KEY, TREE_KEYS, Part, Task
from app.protocol.usage import USAGE_KEY

from .emissions import response_artifact_id

__all__ = [
    "DEPTH_KEY",
    "PARENT_KEY",
    "PATH_KEY",
    "TREE_KEYS",
    "AgentCalls",
    "AgentInfo",
    "CallError",
    "ChildTask",
]


class CallError(Exception):
    """A call the server refused (unknown role, depth or loop, not a child of this run's task, ...): the text
    says why, for the agent to read."""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """One role as `list_agents` shows it: what `GET /agents` knows."""

    role: str
    name: str
    description: str
    skills: tuple[dict[str, Any], ...]
    available: bool
    """An agent of the role is running somewhere now (a replica's runner, or a remote worker)."""


@dataclass(frozen=True, slots=True)
class ChildTask:
    """A child task as a call returns it: where it stands, and what it said."""

    task_id: str
    context_id: str
    role: str
    state: str
    """The A2A state name in v1.0's lower-case words: `working`, `input-required`, `completed`, ..."""
    text: str
    """Its answer when it ended (the response artifact's text, else the last status message), or its
    question when it asks; empty while it works."""
    usage: dict[str, Any] | None = None
    """Its usage summary (`metadata.usage`), once it reported any."""
    artifacts: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    """Its artifacts' names and text, for the caller to read."""


class AgentCalls(Protocol):
    """The calls of one run (see the module's docstring)."""

    async def list_agents(self) -> Sequence[AgentInfo]: ...

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask: ...

    async def get_task(self, task_id: str) -> ChildTask: ...

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask: ...

    async def cancel_task(self, task_id: str) -> ChildTask: ...


def child_task(task: Task, role: str) -> ChildTask:
    """A child as a call returns it: its state, its answer or question, its usage and artifacts."""
    state = task.status.state
    usage = (task.metadata or {}).get(USAGE_KEY)
    return ChildTask(
        task_id=task.id,
        context_id=task.context_id,
        role=role,
        state=state.value,
        text=_said(task),
        usage=usage if isinstance(usage, dict) else None,
        artifacts=tuple(
            {"name": a.name, "text": "\n".join(p.text for p in a.parts if p.text is not None)}
            for a in task.artifacts
        ),
    )


def _said(task: Task) -> str:
    """The question of a task that asks; the answer of one that ended (its response artifact's text, else
    its last status message's); nothing while it works."""
    state = task.status.state
    status_text = task.status.message.text() if task.status.message is not None else ""
    if state in INTERRUPTED_STATES:
        return status_text
    if not state.terminal:
        return ""
    rid = response_artifact_id(task.id)
    for a in task.artifacts:
        if a.artifact_id == rid:
            text = "".join(p.text for p in a.parts if p.text is not None).strip()
            if text:
                return text
    return status_text
