"""The canonical domain model: one shape for every wire version.

Codecs in this package translate wire JSON (v0.3 today) to and from these objects; nothing below `api/`
sees wire shapes. The storage form (`to_store`/`from_store`) is a compact, version-neutral JSON that the
store writes and reads; it never leaves the server. The events of a task's log, made of these, are in
`events.py`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class TaskState(StrEnum):
    """Task states; the values are the v0.3 wire names."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"
    REJECTED = "rejected"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED})
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
SESSION_KEY = "session"
"""What a run is (its model, the coding-agent CLI's session id): a key of a status-update's metadata that
the task's metadata keeps (`session_of`), so run bookkeeping is never one of the task's artifacts, which
clients show as the agent's output."""
SESSION_FIELD_LIMIT = 256
"""Longest value a session entry keeps; longer ones, and entries that are not strings, are dropped."""


def session_of(metadata: dict[str, Any] | None) -> dict[str, str] | None:
    """The session a status-update's metadata reports: its string entries of at most SESSION_FIELD_LIMIT
    characters (at most 16 of them); None when it reports none."""
    raw = (metadata or {}).get(SESSION_KEY)
    if not isinstance(raw, dict):
        return None
    kept = {
        k: v
        for k, v in list(raw.items())[:16]
        if isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= SESSION_FIELD_LIMIT
    }
    return kept or None


PARENT_KEY = "parentTaskId"
"""A child task's metadata (and its first message's): the task whose run started it."""
DEPTH_KEY = "callDepth"
"""A child task's metadata: how many calls deep it is (a task a client started is at depth 0)."""
PATH_KEY = "callPath"
"""A child task's metadata: the roles from the tree's root task down to this one, in order."""
TREE_KEYS = (PARENT_KEY, DEPTH_KEY, PATH_KEY)
"""The metadata of the task tree (agents calling agents, `app/agents/calls.py`): the server alone writes
it, so a client's message that carries one of them is refused; a new task takes it from its first
message (`tree_of`)."""


def tree_of(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The tree keys a (server-made) first message's metadata carries, for its task's metadata; None when
    it carries none."""
    tree = {k: metadata[k] for k in TREE_KEYS if k in (metadata or {})}
    return tree or None


class Role(StrEnum):
    USER = "user"
    AGENT = "agent"


def new_id() -> str:
    """A random (version 4) UUID as text, formatted here: `str(uuid.uuid4())` takes twice as long, and a
    send makes several."""
    return _uuid_text(bytearray(os.urandom(16)), 4)


def name_id(namespace: uuid.UUID, name: str) -> str:
    """`str(uuid.uuid5(namespace, name))`, in half its time: a name-based (SHA-1, version 5) UUID."""
    return _uuid_text(bytearray(hashlib.sha1(namespace.bytes + name.encode()).digest()[:16]), 5)


def _uuid_text(b: bytearray, version: int) -> str:
    """16 bytes as a UUID of `version` (RFC 4122 variant), in its canonical text."""
    b[6] = b[6] & 0x0F | version << 4
    b[8] = b[8] & 0x3F | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a `Z`, as v1.0 requires and v0.3 clients accept."""
    if ts.tzinfo is not UTC:
        ts = ts.astimezone(UTC)
    # A third faster than isoformat() and a slice; an f-string is slower than either.
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031
        ts.year,
        ts.month,
        ts.day,
        ts.hour,
        ts.minute,
        ts.second,
        ts.microsecond // 1000,
    )


def now_iso() -> str:
    """The current time as the domain keeps timestamps: ISO-8601 UTC, milliseconds, `Z`."""
    return iso(utcnow())


def parse_iso(value: str) -> datetime:
    ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


@dataclass(slots=True)
class Part:
    """A flat part: exactly one of text, raw, url or data is set (the v1.0 shape)."""

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = None
    media_type: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        if self.text is not None:
            return "text"
        if self.raw is not None or self.url is not None:
            return "file"
        return "data"

    def to_store(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.text is not None:
            out["text"] = self.text
        elif self.raw is not None:
            out["raw"] = base64.b64encode(self.raw).decode()
        elif self.url is not None:
            out["url"] = self.url
        else:
            out["data"] = self.data
        if self.media_type:
            out["mediaType"] = self.media_type
        if self.filename:
            out["filename"] = self.filename
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    @classmethod
    def from_store(cls, d: dict[str, Any]) -> Part:
        raw = d.get("raw")
        return cls(
            text=d.get("text"),
            raw=base64.b64decode(raw) if raw is not None else None,
            url=d.get("url"),
            data=d.get("data"),
            media_type=d.get("mediaType"),
            filename=d.get("filename"),
            metadata=d.get("metadata"),
        )


@dataclass(slots=True)
class Message:
    message_id: str
    role: Role
    parts: list[Part]
    context_id: str | None = None
    task_id: str | None = None
    reference_task_ids: list[str] = field(default_factory=list)
    extensions: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    requested_extensions: list[str] = field(default_factory=list)
    """Extensions the caller asked for in the request's headers: kept for the agent, never encoded."""
    active_extensions: list[str] = field(default_factory=list)
    """Those of them the server activated (the card declares them): kept for the agent, never encoded."""

    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.text is not None)

    def with_optional(self, out: dict[str, Any]) -> dict[str, Any]:
        """`out` with the optional fields that are set, named alike in the store and on every wire."""
        if self.context_id:
            out["contextId"] = self.context_id
        if self.task_id:
            out["taskId"] = self.task_id
        if self.reference_task_ids:
            out["referenceTaskIds"] = self.reference_task_ids
        if self.extensions:
            out["extensions"] = self.extensions
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    def to_store(self) -> dict[str, Any]:
        out = self.with_optional(
            {
                "messageId": self.message_id,
                "role": self.role.value,
                "parts": [p.to_store() for p in self.parts],
            }
        )
        if self.requested_extensions:
            out["requestedExtensions"] = self.requested_extensions
        if self.active_extensions:
            out["activeExtensions"] = self.active_extensions
        return out

    @classmethod
    def from_store(cls, d: dict[str, Any]) -> Message:
        return cls(
            message_id=d["messageId"],
            role=Role(d["role"]),
            parts=[Part.from_store(p) for p in d["parts"]],
            context_id=d.get("contextId"),
            task_id=d.get("taskId"),
            reference_task_ids=d.get("referenceTaskIds", []),
            extensions=d.get("extensions", []),
            metadata=d.get("metadata"),
            requested_extensions=d.get("requestedExtensions", []),
            active_extensions=d.get("activeExtensions", []),
        )


@dataclass(slots=True)
class TaskStatus:
    state: TaskState
    timestamp: str
    """ISO-8601 UTC with a `Z` (see `now_iso`): formatted once, sent and stored many times."""
    message: Message | None = None

    def to_store(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state.value, "timestamp": self.timestamp}
        if self.message is not None:
            out["message"] = self.message.to_store()
        return out

    @classmethod
    def from_store(cls, d: dict[str, Any]) -> TaskStatus:
        msg = d.get("message")
        return cls(
            state=TaskState(d["state"]),
            timestamp=d["timestamp"],
            message=Message.from_store(msg) if msg else None,
        )


@dataclass(slots=True)
class Artifact:
    artifact_id: str
    parts: list[Part]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] = field(default_factory=list)

    def to_store(self) -> dict[str, Any]:
        return self.encode(Part.to_store)

    def copy(self) -> Artifact:
        """A copy with lists of its own, which folding later chunks into it may extend."""
        return Artifact(
            self.artifact_id,
            list(self.parts),
            self.name,
            self.description,
            self.metadata,
            list(self.extensions),
        )

    def encode(self, encode_part: Callable[[Part], dict[str, Any]]) -> dict[str, Any]:
        """The artifact as JSON, the same in the store and on every wire but for how a part looks."""
        out: dict[str, Any] = {"artifactId": self.artifact_id, "parts": [encode_part(p) for p in self.parts]}
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        if self.metadata:
            out["metadata"] = self.metadata
        if self.extensions:
            out["extensions"] = self.extensions
        return out

    @classmethod
    def from_store(cls, d: dict[str, Any]) -> Artifact:
        return cls(
            artifact_id=d["artifactId"],
            parts=[Part.from_store(p) for p in d["parts"]],
            name=d.get("name"),
            description=d.get("description"),
            metadata=d.get("metadata"),
            extensions=d.get("extensions", []),
        )


@dataclass(slots=True)
class StateTransition:
    state: TaskState
    timestamp: str


@dataclass(slots=True)
class Task:
    id: str
    context_id: str
    status: TaskStatus
    history: list[Message] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    transitions: list[StateTransition] = field(default_factory=list)

    def wire_metadata(self, state_names: Mapping[TaskState, str]) -> dict[str, Any] | None:
        """The task's metadata with its state transitions (`stateTransitions`, states as `state_names` spells
        them) added; None when there is neither."""
        metadata = dict(self.metadata or {})
        if self.transitions:
            metadata["stateTransitions"] = [
                {"state": state_names[tr.state], "timestamp": tr.timestamp} for tr in self.transitions
            ]
        return metadata or None

    def with_history(self, history_length: int | None) -> Task:
        """A shallow copy holding at most the `history_length` most recent messages (None: all)."""
        if history_length is None or history_length >= len(self.history):
            history = list(self.history)
        elif history_length <= 0:
            history = []
        else:
            history = self.history[-history_length:]
        return Task(
            id=self.id,
            context_id=self.context_id,
            status=self.status,
            history=history,
            artifacts=list(self.artifacts),
            metadata=self.metadata,
            transitions=list(self.transitions),
        )


@dataclass(slots=True)
class SendConfig:
    """What the client asked of a send, independent of wire version."""

    blocking: bool = True
    history_length: int | None = None
    accepted_output_modes: list[str] = field(default_factory=list)
    task_id: str | None = None
    """The id a legacy `tasks/send` names its task by: it continues the caller's task of that id, or a new
    task takes it."""
    made_message_id: bool = False
    """The message came without a messageId and the server made one: an Idempotency-Key's fingerprint leaves
    it out, so a retry of the same request is the same request."""


@dataclass(slots=True)
class PushConfig:
    """A webhook for a task's updates. `version` is the wire version it was registered in: its
    notifications are sent in that version's shape. `delivery` (read-only) holds the outcomes so far."""

    url: str
    id: str = ""
    token: str | None = None
    scheme: str | None = None
    credentials: str | None = None
    task_id: str = ""
    version: str = "0.3"
    delivery: dict[str, Any] | None = None
