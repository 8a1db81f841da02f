"""What a webhook receives for one event, in each protocol version's shape.

v0.3 webhooks get the whole Task as it stands after the event (`kind: "task"`, as the v0.3 spec's example
and a2a-python 0.3 post it); v1.0 webhooks get the event as a `StreamResponse` (`{"statusUpdate": ...}` or
`{"artifactUpdate": ...}`, spec §4.3.3). Both bodies are built when the event is committed, so a delivery
minutes later still says what the task was at that moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from app.protocol import v03, v10
from app.protocol.model import (
    Artifact,
    ArtifactUpdate,
    EventRecord,
    Message,
    StateTransition,
    StatusUpdate,
    Task,
    fold_artifact,
)

V03 = "0.3"
V10 = "1.0"


def _copy(task: Task, messages: Iterable[Message]) -> Task:
    """A copy of `task` whose artifacts can be folded into without touching the original."""
    return Task(
        id=task.id,
        context_id=task.context_id,
        status=task.status,
        history=[*task.history, *messages],
        artifacts=[
            Artifact(a.artifact_id, list(a.parts), a.name, a.description, a.metadata, list(a.extensions))
            for a in task.artifacts
        ],
        metadata=task.metadata,
        transitions=list(task.transitions),
    )


def notifications(
    task: Task, records: list[EventRecord], messages: Iterable[Message], now: datetime
) -> list[dict[str, Any]]:
    """The outbox parameters for `records` applied to `task` (as it was before them), in order.

    `messages` are the user messages that came with the events (they join the history first).
    """
    view = _copy(task, messages)
    out: list[dict[str, Any]] = []
    for rec in records:
        ev = rec.event
        if isinstance(ev, StatusUpdate):
            if ev.status.state != view.status.state:
                view.transitions.append(StateTransition(ev.status.state, ev.status.timestamp))
            view.status = ev.status
            if ev.status.message is not None:
                view.history.append(ev.status.message)
        else:
            assert isinstance(ev, ArtifactUpdate)
            fold_artifact(view.artifacts, ev)
        out.append(
            {
                "task_id": task.id,
                "seq": rec.seq,
                "body_v03": v03.encode_task(view),
                "body_v10": v10.encode_event(ev),
                "created_at": now,
            }
        )
    return out
