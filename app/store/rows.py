"""The rows a `Write` carries, built from the domain model: with `models.py`, the one place that names the
columns, so a schema change touches only `store/` and `migrations/`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.protocol.events import ArtifactUpdate, event_kind, fold_artifact
from app.protocol.model import PARENT_KEY, Artifact

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from app.protocol.events import Event, EventRecord
    from app.protocol.model import Message, StateTransition, Task, TaskStatus
    from app.protocol.usage import Usage

TITLE_CHARS = 200
"""A task's title (`tasks.title`): its first message's text up to this many characters."""


def message_row(task_id: str, owner: str, m: Message, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "owner": owner,
        "message_id": m.message_id,
        "role": m.role.value,
        "body": m.to_store(),
        "created_at": now,
    }


def transition_rows(transitions: Iterable[StateTransition]) -> list[dict[str, str]]:
    return [{"state": t.state.value, "timestamp": t.timestamp} for t in transitions]


def event_rows(task_id: str, records: list[EventRecord], now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "task_id": task_id,
            "seq": r.seq,
            "kind": event_kind(r.event),
            "body": r.event.to_store(),
            "created_at": now,
        }
        for r in records
    ]


def artifact_rows(task_id: str, records: list[EventRecord]) -> list[dict[str, Any]]:
    """The artifact chunk of each artifact event, keyed by the event's number."""
    return [
        {
            "task_id": task_id,
            "seq": r.seq,
            "artifact_id": r.event.artifact.artifact_id,
            "append": r.event.append,
            "body": r.event.artifact.to_store(),
        }
        for r in records
        if isinstance(r.event, ArtifactUpdate)
    ]


def task_update(
    task_id: str,
    status: TaskStatus,
    transitions: Iterable[StateTransition],
    last_seq: int,
    now: datetime,
    lease_owner: str | None,
    lease_expires_at: datetime | None,
) -> dict[str, Any]:
    """The task row's new state after a step (the writer's `Write.task_update`)."""
    return {
        "_id": task_id,
        "state": status.state.value,
        "status": status.to_store(),
        "transitions": transition_rows(transitions),
        "last_seq": last_seq,
        "updated_at": now,
        "status_at": status.timestamp,
        "lease_owner": lease_owner,
        "lease_expires_at": lease_expires_at,
    }


def task_metadata(task_id: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The task row's new metadata (the writer's `Write.task_metadata`), e.g. its summed usage."""
    return {"_id": task_id, "_metadata": metadata}


def update_mark(update: dict[str, Any]) -> tuple[str, tuple[int, str | None]]:
    """What a `task_update` leaves to recognise it by: the task's id, and its (last_seq, lease_owner) as
    `Leases.recorded` reads them back."""
    return update["_id"], (update["last_seq"], update["lease_owner"])


def new_task(
    task: Task,
    owner: str,
    now: datetime,
    lease_owner: str | None,
    lease_expires_at: datetime | None,
    retry_key: str | None,
    role: str = "default",
    traceparent: str | None = None,
    run_started: bool = False,
    exclusive: bool = False,
) -> dict[str, Any]:
    """A new task's row, its first event (`submitted`, number 1) already counted; `traceparent`: the W3C
    trace context of the request that created it (with tracing on); `run_started`: its run starts here
    once it is committed (`run_started_at`); `exclusive`: the only open task of its context allowed. Its
    metadata is its tree's (`tree_of` its first message), with the parent in a column of its own."""
    return {
        "id": task.id,
        "context_id": task.context_id,
        "owner": owner,
        "state": task.status.state.value,
        "status": task.status.to_store(),
        "transitions": transition_rows(task.transitions),
        "metadata": task.metadata,
        "title": title(task),
        "last_seq": 1,
        "created_at": now,
        "updated_at": now,
        "status_at": task.status.timestamp,
        "lease_owner": lease_owner,
        "lease_expires_at": lease_expires_at,
        "retry_key": retry_key,
        "role": role,
        "traceparent": traceparent,
        "run_started_at": now if run_started else None,
        "exclusive": exclusive,
        "parent_task_id": parent_of(task),
    }


def parent_of(task: Task) -> str | None:
    """The task whose run started `task` (its metadata's `parentTaskId`, the server's own), if any."""
    parent = (task.metadata or {}).get(PARENT_KEY)
    return parent if isinstance(parent, str) else None


def title(task: Task) -> str | None:
    """The first message's text, whitespace folded and cut to `TITLE_CHARS` (None when it has none)."""
    if not task.history:
        return None
    text = " ".join(task.history[0].text().split())
    return text[:TITLE_CHARS] or None


def folded_rows(task: Task, events: list[Event]) -> list[dict[str, Any]]:
    """A finished task's artifacts as stored from now on: its artifacts with `events` folded in, one row
    each (folded on copies: the live task is updated only once the write commits)."""
    folded = [Artifact.from_store(a.to_store()) for a in task.artifacts]
    for ev in events:
        if isinstance(ev, ArtifactUpdate):
            fold_artifact(folded, ev)
    return [
        {"task_id": task.id, "seq": i, "artifact_id": a.artifact_id, "append": False, "body": a.to_store()}
        for i, a in enumerate(folded, start=1)
    ]


def usage_rows(
    task_id: str,
    owner: str,
    context_id: str,
    role: str,
    reports: Iterable[tuple[int, Usage]],
    now: datetime,
) -> list[dict[str, Any]]:
    """The `task_usage` rows of the usage reports (each with the number of the event carrying it): one per
    model, the run's own figures on the first (see `TaskUsageRow`)."""
    out = []
    day = now.date().isoformat()
    for seq, usage in reports:
        run = {
            "wall_ms": usage.wall_ms or 0,
            "turns": usage.turns or 0,
            "tool_calls": usage.tool_calls or 0,
            "reports": 1,
        }
        for i, m in enumerate(usage.models or (None,)):
            out.append(
                {
                    "task_id": task_id,
                    "seq": seq,
                    "model": m.model if m is not None else "",
                    "owner": owner,
                    "context_id": context_id,
                    "role": role,
                    "day": day,
                    "created_at": now,
                    "input_tokens": m.input_tokens if m is not None else 0,
                    "output_tokens": m.output_tokens if m is not None else 0,
                    "cache_read_tokens": m.cache_read_tokens if m is not None else 0,
                    "cache_write_tokens": m.cache_write_tokens if m is not None else 0,
                    "cost_usd": m.cost_usd if m is not None else None,
                    "cost_source": m.cost_source if m is not None else None,
                    **(run if i == 0 else dict.fromkeys(run, 0)),
                }
            )
    return out
