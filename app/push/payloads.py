"""What a webhook receives for one event, in each protocol version's shape, built at delivery time.

v0.3 webhooks get the whole Task as it stood right after the event (`kind: "task"`, as the v0.3 spec's
example and a2a-python 0.3 post it); v1.0 webhooks get the event as a `StreamResponse` (`{"statusUpdate":
...}` or `{"artifactUpdate": ...}`, spec §4.3.3).

Nothing of this runs on the task's path. A notification is a pointer written with the event in the same
transaction: (webhook, event seq, how many messages the history had then): O(1) per event whatever the
task's size or its webhooks' versions, and a webhook registered a moment ago on another replica is picked
up by the writer's INSERT ... SELECT and gets the body of its own version, since the body is chosen only
when it is sent. The delivery worker builds bodies from the event log, which is append-only and numbered,
so the Task "as of event k" is a fact that never changes: each notification still says what the task was
at that event, however late or often (at least once) it is delivered, in order per webhook.

Why as of the event and not the task as it stands when sent: the spec leaves the v0.3 body open (§9: enough
to identify the task and its state), but a receiver of "the current task" ten times over learns nothing
from the nine first and could see a state before the event it is told about is even delivered; as of the
event, the v0.3 receiver sees the same sequence of states a streaming client does. It is no dearer: a
`View` per v0.3 webhook (the task folded up to the last event sent) is kept between batches and claims,
so a webhook's queue is folded once, event by event (O(event) each), from the rows the outbox reads
anyway; only a cold start (first claim on this replica, a gap, eviction) reads the task's log up to the
queue's head, once. Encoding a whole Task per notification stays O(task), which is what a v0.3 body is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.protocol import json_v03, protojson_v10
from app.protocol.events import ArtifactUpdate, Event, EventRecord, StatusUpdate, fold_artifact
from app.protocol.model import Artifact, Message, StateTransition, Task, TaskState, TaskStatus

V03 = "0.3"
V10 = "1.0"
VIEWS = 512
"""v0.3 webhooks whose folded task a replica keeps (least recently used dropped first)."""


def notifications(
    task: Task, records: list[EventRecord], messages: Iterable[Message], now: datetime
) -> list[dict[str, Any]]:
    """The outbox parameters for `records` applied to `task` (as it was before them), in order: O(1) each.

    `messages` are the user messages that came with the events (they join the history first); a status
    with a message adds it to the history at its own event.
    """
    history = len(task.history) + sum(1 for _ in messages)
    out: list[dict[str, Any]] = []
    for rec in records:
        if isinstance(rec.event, StatusUpdate) and rec.event.status.message is not None:
            history += 1
        out.append({"task_id": task.id, "seq": rec.seq, "history_len": history, "created_at": now})
    return out


@dataclass(slots=True, eq=False)
class View:
    """A task folded from its event log up to event `seq` (history aside), and the events after it read
    so far; the history is the task's messages, of which a notification shows the first `history_len`."""

    task_id: str
    context_id: str
    metadata: dict[str, Any] | None
    seq: int = 0
    status: TaskStatus | None = None
    transitions: list[StateTransition] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    last_message_id: int = 0
    ahead: dict[int, Event] = field(default_factory=dict)
    """Events after `seq` already read, by seq."""

    def missing(self, upto: int) -> bool:
        """Whether an event in (seq, upto] has not been read yet."""
        return any(s not in self.ahead for s in range(self.seq + 1, upto + 1))

    def add_messages(self, rows: Iterable[tuple[int, dict[str, Any]]]) -> None:
        for row_id, body in rows:
            if row_id > self.last_message_id:
                self.messages.append(Message.from_store(body))
                self.last_message_id = row_id

    def advance(self, seq: int) -> None:
        """Fold the events up to `seq` (each once, in order)."""
        while self.seq < seq:
            self.seq += 1
            ev = self.ahead.pop(self.seq, None)
            if isinstance(ev, StatusUpdate):
                if self.status is None or ev.status.state != self.status.state:
                    self.transitions.append(StateTransition(ev.status.state, ev.status.timestamp))
                self.status = ev.status
            elif isinstance(ev, ArtifactUpdate):
                fold_artifact(self.artifacts, ev)

    def task_body(self, seq: int, history_len: int | None) -> dict[str, Any]:
        """The v0.3 Task as of event `seq`, with its first `history_len` messages."""
        self.advance(seq)
        history = self.messages if history_len is None else self.messages[:history_len]
        task = Task(
            id=self.task_id,
            context_id=self.context_id,
            status=self.status or TaskStatus(TaskState.SUBMITTED, ""),
            history=history,
            artifacts=self.artifacts,
            metadata=self.metadata,
            transitions=self.transitions,
        )
        return json_v03.encode_task(task)


class Views:
    """The v0.3 webhooks' folded tasks on this replica, by webhook (least recently used dropped first).

    A view only ever moves forward, and a webhook is delivered by one task at a time, so the view handed
    out with a batch is that delivery's own until it asks for the next batch."""

    def __init__(self, size: int = VIEWS) -> None:
        self._size = size
        self._views: OrderedDict[int, View] = OrderedDict()

    def __len__(self) -> int:
        return len(self._views)

    def for_queue(
        self, pk: int, task_id: str, context_id: str, metadata: dict[str, Any] | None, head: int
    ) -> View:
        """The webhook's view, usable for a queue starting at event `head` (a fresh one if it is past it)."""
        view = self._views.pop(pk, None)
        if view is None or view.seq > head:
            view = View(task_id, context_id, metadata)
        self._views[pk] = view
        while len(self._views) > self._size:
            self._views.popitem(last=False)
        return view

    def forget(self, pk: int) -> None:
        """Drop a webhook's view whose task has ended and whose queue is empty: it will not be needed."""
        view = self._views.get(pk)
        if view is not None and view.status is not None and view.status.state.terminal and not view.ahead:
            del self._views[pk]


def v10_body(event: Event) -> dict[str, Any]:
    """The v1.0 StreamResponse for one event."""
    return protojson_v10.encode_event(event)
