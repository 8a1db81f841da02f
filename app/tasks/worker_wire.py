"""The remote worker protocol's wire forms, both ways, in one place: a claimed task (`Claimed`), a task, a
run's events, and a held task as the worker knows it. The server's side (`tasks/workers.py`) and the
worker's (`runner/remote.py`) import this, so an encoding and its decoding are read and changed together.

It imports the protocol's types and `held.py` only: the worker has nothing else of the replica's tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.events import Event, event_from_store, event_kind
from app.protocol.model import Artifact, Message, Role, StateTransition, Task, TaskState, TaskStatus

from .held import LiveTask


def task_to_wire(task: Task) -> dict[str, Any]:
    """A task as a worker receives it: store forms of its parts, and its metadata (its usage so far).
    A worker's events carry their usage reports in their metadata (`to_store`), as a replica's do."""
    return {
        "id": task.id,
        "contextId": task.context_id,
        "status": task.status.to_store(),
        "history": [m.to_store() for m in task.history],
        "artifacts": [a.to_store() for a in task.artifacts],
        "transitions": [{"state": t.state.value, "timestamp": t.timestamp} for t in task.transitions],
        "metadata": task.metadata,
    }


def task_from_wire(d: Mapping[str, Any]) -> Task:
    return Task(
        id=d["id"],
        context_id=d["contextId"],
        status=TaskStatus.from_store(d["status"]),
        history=[Message.from_store(m) for m in d.get("history", [])],
        artifacts=[Artifact.from_store(a) for a in d.get("artifacts", [])],
        transitions=[
            StateTransition(TaskState(t["state"]), t["timestamp"]) for t in d.get("transitions", [])
        ],
        metadata=d.get("metadata"),
    )


def events_to_wire(events: list[Event]) -> list[dict[str, Any]]:
    return [{"kind": event_kind(e), "body": e.to_store()} for e in events]


def events_from_wire(task: Task, items: Sequence[Mapping[str, Any]]) -> list[Event]:
    return [event_from_store(task.id, task.context_id, i["kind"], i["body"]) for i in items]


def known_to_wire(live: LiveTask) -> dict[str, Any]:
    """A held task as the worker describes it in a sync: its last event number and last user message id
    (the server tells it of an answer it does not have yet)."""
    user = next((m.message_id for m in reversed(live.task.history) if m.role is Role.USER), None)
    return {"seq": live.seq, "user": user}


def known_from_wire(value: Any) -> tuple[int, str | None]:
    """`known_to_wire` read back; a bare number is the last event number alone."""
    if isinstance(value, dict):
        return int(value.get("seq", 0)), value.get("user")
    return int(value), None


@dataclass(slots=True)
class Claimed:
    """A task claimed for a worker, as the claim hands it over."""

    task: Task
    owner: str
    last_seq: int
    traceparent: str | None = None
    """The trace context the task was created in: the worker's run continues it."""

    def to_wire(self) -> dict[str, Any]:
        out = {"task": task_to_wire(self.task), "owner": self.owner, "lastSeq": self.last_seq}
        if self.traceparent:
            out["traceparent"] = self.traceparent
        return out

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Claimed:
        return cls(task_from_wire(d["task"]), d["owner"], d["lastSeq"], d.get("traceparent"))
