"""The events of a task's log: status and artifact updates (`Event`), numbered in the log (`EventRecord`),
their storage form (`to_store`, `event_from_store`), and what they do to a task (`fold_artifact`).

The things the events carry (`TaskStatus`, `Message`, `Artifact`, ...) are in `model.py`, which imports
nothing of this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .model import Artifact, Message, Part, Role, TaskState, TaskStatus, new_id, now_iso


@dataclass(slots=True)
class StatusUpdate:
    task_id: str
    context_id: str
    status: TaskStatus
    final: bool = False
    metadata: dict[str, Any] | None = None

    def to_store(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.to_store(), "final": self.final}
        if self.metadata:
            out["metadata"] = self.metadata
        return out


def status_update(
    task_id: str, context_id: str, state: TaskState, text: str | None = None, parts: Sequence[Part] = ()
) -> StatusUpdate:
    """A status-update event stamped now, with an agent message when there is text or parts; final when
    terminal."""
    content = ([Part(text=text)] if text is not None else []) + list(parts)
    message = None
    if content:
        message = Message(
            message_id=new_id(), role=Role.AGENT, parts=content, context_id=context_id, task_id=task_id
        )
    status = TaskStatus(state=state, timestamp=now_iso(), message=message)
    return StatusUpdate(task_id=task_id, context_id=context_id, status=status, final=state.terminal)


@dataclass(slots=True)
class ArtifactUpdate:
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None

    def to_store(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "artifact": self.artifact.to_store(),
            "append": self.append,
            "lastChunk": self.last_chunk,
        }
        if self.metadata:
            out["metadata"] = self.metadata
        return out


Event = StatusUpdate | ArtifactUpdate


@dataclass(slots=True, frozen=True)
class EventRecord:
    """An event as it sits in the task's log: its per-task sequence number decides its order."""

    seq: int
    event: Event


def event_from_store(task_id: str, context_id: str, kind: str, body: dict[str, Any]) -> Event:
    if kind == "status":
        return StatusUpdate(
            task_id=task_id,
            context_id=context_id,
            status=TaskStatus.from_store(body["status"]),
            final=body.get("final", False),
            metadata=body.get("metadata"),
        )
    return ArtifactUpdate(
        task_id=task_id,
        context_id=context_id,
        artifact=Artifact.from_store(body["artifact"]),
        append=body.get("append", False),
        last_chunk=body.get("lastChunk", False),
        metadata=body.get("metadata"),
    )


def event_kind(event: Event) -> str:
    return "status" if isinstance(event, StatusUpdate) else "artifact"


def fold_artifact(artifacts: list[Artifact], update: ArtifactUpdate) -> None:
    """Apply an artifact-update to a task's artifact list: append parts or replace the artifact."""
    art = update.artifact
    for i, existing in enumerate(artifacts):
        if existing.artifact_id == art.artifact_id:
            if update.append:
                existing.parts.extend(p for p in art.parts if p.text != "")
                if art.metadata:
                    existing.metadata = {**(existing.metadata or {}), **art.metadata}
            else:
                artifacts[i] = art.copy()
            return
    artifacts.append(art.copy())
