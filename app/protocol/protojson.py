"""ProtoJSON printing shared by the two protos this server speaks: v0.3's (its HTTP+JSON binding) and v1.0's.

Both print a Task, Message, status and event alike: JSON names, enums by name, unset fields omitted, a
stream event as the `StreamResponse` oneof (`statusUpdate` / `artifactUpdate`). What differs is data, not
code: the enum names (v0.3 spells `TASK_STATE_CANCELLED`), how a part looks, the field holding a message's
parts (`content` in v0.3, `parts` in v1.0), and the fields only one proto has (v1.0's `referenceTaskIds`,
v0.3's `final`). Output is built by hand because it is on the path of every response and event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .events import ArtifactUpdate, StatusUpdate
from .model import Role

if TYPE_CHECKING:  # annotations only
    from .events import Event
    from .model import Artifact, Message, Part, Task, TaskState, TaskStatus

ROLE_NAMES = {Role.USER: "ROLE_USER", Role.AGENT: "ROLE_AGENT"}


@dataclass(frozen=True, slots=True)
class ProtoJSON:
    """The printer of one proto version."""

    state_names: Mapping[TaskState, str]
    encode_part: Callable[[Part], dict[str, Any]]
    parts_field: str
    """The Message field that holds its parts: `content` (v0.3) or `parts` (v1.0)."""
    reference_task_ids: bool
    """Whether Message has `referenceTaskIds` (v1.0 only)."""
    final: bool
    """Whether a status update carries `final` (v0.3 only)."""

    def encode_message(self, m: Message) -> dict[str, Any]:
        out = m.with_optional(
            {
                "messageId": m.message_id,
                "role": ROLE_NAMES[m.role],
                self.parts_field: [self.encode_part(p) for p in m.parts],
            }
        )
        if not self.reference_task_ids:
            out.pop("referenceTaskIds", None)
        return out

    def encode_status(self, s: TaskStatus) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state_names[s.state], "timestamp": s.timestamp}
        if s.message is not None:
            out["message"] = self.encode_message(s.message)
        return out

    def encode_artifact(self, a: Artifact) -> dict[str, Any]:
        return a.encode(self.encode_part)

    def encode_task(
        self, t: Task, history_length: int | None = None, include_artifacts: bool = True
    ) -> dict[str, Any]:
        """A bare Task. `historyLength` 0 leaves `history` out; artifacts only when included."""
        out: dict[str, Any] = {"id": t.id, "contextId": t.context_id, "status": self.encode_status(t.status)}
        if include_artifacts and t.artifacts:
            out["artifacts"] = [self.encode_artifact(a) for a in t.artifacts]
        view = t.with_history(history_length)
        if view.history:
            out["history"] = [self.encode_message(m) for m in view.history]
        metadata = t.wire_metadata(self.state_names)
        if metadata:
            out["metadata"] = metadata
        return out

    def encode_event(self, e: Event) -> dict[str, Any]:
        """A `StreamResponse` holding a status or artifact update."""
        if isinstance(e, StatusUpdate):
            body: dict[str, Any] = {
                "taskId": e.task_id,
                "contextId": e.context_id,
                "status": self.encode_status(e.status),
            }
            if self.final and e.final:
                body["final"] = True
            if e.metadata:
                body["metadata"] = e.metadata
            return {"statusUpdate": body}
        assert isinstance(e, ArtifactUpdate)
        body = {"taskId": e.task_id, "contextId": e.context_id, "artifact": self.encode_artifact(e.artifact)}
        if e.append:
            body["append"] = True
        if e.last_chunk:
            body["lastChunk"] = True
        if e.metadata:
            body["metadata"] = e.metadata
        return {"artifactUpdate": body}


_ROLES_IN: dict[Any, Role] = {"ROLE_USER": Role.USER, "ROLE_AGENT": Role.AGENT, 1: Role.USER, 2: Role.AGENT}


def parse_role(value: Any) -> Role:
    """A Role from its ProtoJSON name or number (both protos number them alike); ValueError otherwise."""
    if isinstance(value, str | int) and not isinstance(value, bool) and value in _ROLES_IN:
        return _ROLES_IN[value]
    raise ValueError("must be ROLE_USER or ROLE_AGENT")


def documented_text(part: dict[str, Any]) -> dict[str, Any]:
    """A text part as documents write it, `{"type": "text", "content": "hi"}`: a string `content` is its
    `text` when the part holds none of `text`, `raw`, `url`, `file` or `data` and names no other kind."""
    content = part.get("content")
    if not isinstance(content, str) or any(k in part for k in ("text", "raw", "url", "file", "data")):
        return part
    if part.get("type", part.get("kind", "text")) != "text":
        return part
    return {**part, "text": content}
