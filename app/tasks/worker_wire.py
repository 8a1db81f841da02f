"""The remote worker protocol's wire forms, both ways, in one place: a claimed task (`Claimed`), a task, a
run's events, a held task as the worker knows it, and a checkpoint's body. The server's side
(`tasks/workers.py`, `api/endpoints/workers.py`) and the worker's (`runner/remote.py`,
`runner/remote_checkpoints.py`) import this, so an encoding and its decoding are read and changed together.

It imports the protocol's types and `held.py` only: the worker has nothing else of the replica's tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

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


CHECKPOINT_TYPE = "application/vnd.a2a.checkpoint"
"""A checkpoint's body, both ways: its manifest as one line of JSON, a newline, then the archive's bytes. The
manifest rides in the body, not a header, as proxies cap headers at a few KiB (nginx: 4-8 KiB)."""
MANIFEST_MAX_BYTES = 1024 * 1024
"""The largest manifest line taken, beside the archive's own cap (CHECKPOINT_MAX_MB)."""
HOLDER_HEADER = "X-A2A-Checkpoint-Holder"
TAKEN_AT_HEADER = "X-A2A-Checkpoint-Taken-At"


def checkpoint_body_max(max_bytes: int) -> int:
    """The largest checkpoint body for an archive cap of `max_bytes`: archive, manifest and newline."""
    return max_bytes + MANIFEST_MAX_BYTES + 1


def checkpoint_to_wire(data: bytes, manifest: Mapping[str, Any]) -> bytes:
    """The body of a checkpoint (`CHECKPOINT_TYPE`); orjson writes no raw newline, so the first ends the
    manifest."""
    return orjson.dumps(manifest) + b"\n" + data


def checkpoint_from_wire(body: bytes) -> tuple[dict[str, Any], bytes]:
    """`checkpoint_to_wire` read back: (manifest, archive); ValueError, saying what is wrong, for a body that
    is not one."""
    line, sep, data = body.partition(b"\n")
    if not sep:
        raise ValueError("the body has no manifest line (JSON, then a newline, then the archive)")
    if len(line) > MANIFEST_MAX_BYTES:
        raise ValueError(f"the manifest is over {MANIFEST_MAX_BYTES} bytes")
    try:
        manifest = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the manifest is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise ValueError("the manifest is not a JSON object")
    return manifest, data
