"""What a step makes of a task, before anything is stored: pure, no I/O, no lock.

`step` numbers a task's new events and checks them against the state machine (`Step`); `step_write` and
`creation_write` make the rows a step or a new task commits (`Write`). The live tasks (`live.py`) commit
them; a remote worker's run steps its own tasks with the same `step` (`runner/remote.py`). Also here: the
values the tasks room and the runner share about tasks (`Snapshot`, `NewTask`, `Unborn`, `STOP_STATES`,
`WORKER_PREFIX`).

It imports the protocol, the row builders (`store/rows.py`, `store/write.py`, `push/payloads.py`,
`push/configs.new_row`) and the state machine (`state.py`); nothing that holds or commits a task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.protocol.attempts import ATTEMPTS_KEY, attempts_of, resume_of
from app.protocol.budget import over_budget
from app.protocol.events import ArtifactUpdate, EventRecord, StatusUpdate, fold_artifact, status_update
from app.protocol.model import (
    INTERRUPTED_STATES,
    SESSION_KEY,
    TERMINAL_STATES,
    StateTransition,
    TaskState,
    session_of,
)
from app.protocol.usage import CHILD_USAGE_KEY, USAGE_KEY, Usage, UsageError, add_child, add_to_summary
from app.push import payloads
from app.push.configs import new_row
from app.store import rows
from app.store.write import Write

from .state import check_transition

if TYPE_CHECKING:
    import asyncio
    from datetime import datetime

    from app.protocol.events import Event
    from app.protocol.model import Message, PushConfig, Task, TaskStatus

log = logging.getLogger(__name__)

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES
"""A blocking send returns once its task is in one of these."""
WORKER_PREFIX = "worker:"
"""Lease holders with this prefix are remote workers (`a2a-server worker`), not replicas: they write
through the worker endpoints, and requests for their tasks are written by whichever replica takes them."""


def holder_name(holder: str, *, start: bool = False) -> str:
    """A lease holder for people: "replica r1", or "worker <principal>:<instance>" (capitalised to `start`
    a sentence)."""
    kind, name = (
        ("worker", holder.removeprefix(WORKER_PREFIX))
        if holder.startswith(WORKER_PREFIX)
        else ("replica", holder)
    )
    return f"{kind.capitalize() if start else kind} {name}"


@dataclass(slots=True)
class Snapshot:
    """A task as of event `seq`: what a subscriber shows first before following the log."""

    task: Task
    seq: int


@dataclass(slots=True)
class NewTask:
    """What a new task's rows are made of (`LiveTasks.create`, `stage`): the task with its first message,
    its owner, that message's retry key, a webhook given with it, the caller's Idempotency-Key row."""

    task: Task
    owner: str
    retry_key: str | None = None
    push: PushConfig | None = None
    key_row: dict[str, Any] | None = None


@dataclass(slots=True, eq=False)
class Unborn:
    """A staged task's creation, waiting to commit with its run's first step."""

    write: Write
    first: list[EventRecord]
    """The `submitted` event, published once the creation commits."""
    born: asyncio.Future[None]
    """Set once the creation is committed; the commit's error if it failed (the task is then dropped)."""


@dataclass(slots=True)
class Step:
    """What `events` (and user `messages`) make of a task, before anything is stored: numbered records,
    the new status, transitions and history. `LiveTasks.apply` commits it; a remote worker's run computes
    the same (`runner/remote.py`)."""

    records: list[EventRecord]
    status: TaskStatus
    transitions: list[StateTransition]
    history_add: list[Message]
    seq: int
    usage: list[tuple[int, Usage]] = field(default_factory=list)
    """The usage reports the status events carry, each with its event's number."""
    metadata: dict[str, Any] | None = None
    """The task's metadata with the reports (and ended children's usage) added to its usage and the session
    reported; None when no event reports any of them."""

    def apply_to(self, task: Task, events: list[Event]) -> None:
        """Bring the in-memory task up to the step, once it is stored."""
        task.status = self.status
        task.transitions = self.transitions
        task.history.extend(self.history_add)
        if self.metadata is not None:
            task.metadata = self.metadata
        for ev in events:
            if isinstance(ev, ArtifactUpdate):
                fold_artifact(task.artifacts, ev)


def step(task: Task, seq: int, events: list[Event], messages: list[Message] | None = None) -> Step:
    """Number `events` after `seq` and check each status change against the state machine; sum the usage
    the status events report into the task's metadata (an ended child's into its `children`, once per
    child), keep the last session one reports there, and list a resume (`protocol/attempts.py`) in `attempts`.

    The status event whose usage takes the task's spend past its budget (`protocol/budget.py`) while the
    task is open ends it: `events` is cut after it and a `failed` status naming the budget and the spend is
    added to them, so whoever writes the task (a replica for its own run or a remote worker's, the worker
    itself) stops it at the same event."""
    state = task.status.state
    status = task.status
    transitions = list(task.transitions)
    history_add = list(messages or ())
    records: list[EventRecord] = []
    usage: list[tuple[int, Usage]] = []
    metadata: dict[str, Any] | None = None
    for i, ev in enumerate(events):
        seq += 1
        records.append(EventRecord(seq, ev))
        if not isinstance(ev, StatusUpdate):
            continue
        check_transition(state, ev.status.state)
        if ev.status.state != state:
            transitions.append(StateTransition(ev.status.state, ev.status.timestamp))
        state = ev.status.state
        status = ev.status
        if status.message is not None:
            history_add.append(status.message)
        report, child, session = reported_usage(ev), child_usage(ev), session_of(ev.metadata)
        resume = resume_of(ev.metadata)
        if report is None and child is None and session is None and resume is None:
            continue
        metadata = dict(task.metadata or {}) if metadata is None else metadata
        if resume is not None:
            metadata[ATTEMPTS_KEY] = [*attempts_of(metadata), resume]
        if report is not None:
            usage.append((seq, report))
            metadata[USAGE_KEY] = add_to_summary(metadata.get(USAGE_KEY), report)
        if child is not None and (added := add_child(metadata.get(USAGE_KEY), *child)) is not None:
            metadata[USAGE_KEY] = added
        if session is not None:
            metadata[SESSION_KEY] = session
        why = None if state.terminal else over_budget(metadata)
        if why is not None:
            failed = status_update(task.id, task.context_id, TaskState.FAILED, why)
            check_transition(state, TaskState.FAILED)
            del events[i + 1 :]
            events.append(failed)
            seq += 1
            records.append(EventRecord(seq, failed))
            transitions.append(StateTransition(TaskState.FAILED, failed.status.timestamp))
            status = failed.status
            if failed.status.message is not None:
                history_add.append(failed.status.message)
            break
    return Step(records, status, transitions, history_add, seq, usage, metadata)


def child_usage(ev: StatusUpdate) -> tuple[str, dict[str, Any]] | None:
    """The ended child's usage a status event of its parent carries (`metadata.childUsage`: its id and
    summary), if it carries one."""
    raw = (ev.metadata or {}).get(CHILD_USAGE_KEY)
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("taskId"), str)
        or not isinstance(raw.get(USAGE_KEY), dict)
    ):
        return None
    return raw["taskId"], raw[USAGE_KEY]


def reported_usage(ev: StatusUpdate) -> Usage | None:
    """The usage report a status event carries (`metadata.usage`), if it carries a valid one."""
    raw = (ev.metadata or {}).get(USAGE_KEY)
    if raw is None:
        return None
    try:
        return Usage.from_wire(raw)
    except UsageError as exc:
        log.warning("task %s: a usage report that is not one was not recorded: %s", ev.task_id, exc)
        return None


def step_write(
    task: Task,
    s: Step,
    events: list[Event],
    messages: list[Message],
    now: datetime,
    *,
    owner: str,
    role: str,
    push: bool,
    artifact_rows: int | None,
    lease: tuple[str, datetime],
    key_row: dict[str, Any] | None = None,
) -> Write:
    """The rows `s` (of `events` and user `messages`) adds to `task` of `owner` and `role`: its webhooks'
    notifications with `push`, the caller's Idempotency-Key row, the task's row held by `lease` (holder,
    expiry). A step that ends the task drops its lease and folds its artifact rows, unless the task's
    stored ones (`artifact_rows`, None: unknown) are already one per artifact."""
    write = Write(
        events=rows.event_rows(task.id, s.records, now),
        artifacts=rows.artifact_rows(task.id, s.records),
        messages=[rows.message_row(task.id, owner, m, now) for m in s.history_add],
        idempotency_key=key_row,
    )
    if s.usage:
        write.usage = rows.usage_rows(task.id, owner, task.context_id, role, s.usage, now)
    if s.metadata is not None:
        write.task_metadata = rows.task_metadata(task.id, s.metadata)
    if push:
        write.notifications = payloads.notifications(task, s.records, messages, now)
    ended = s.status.state.terminal
    if ended:
        folded = rows.folded_rows(task, events)
        if artifact_rows_after(artifact_rows, write) != len(folded):
            write.folded_artifacts = folded
    write.task_update = rows.task_update(
        task.id,
        s.status,
        s.transitions,
        s.seq,
        now,
        None if ended else lease[0],
        None if ended else lease[1],
    )
    return write


def artifact_rows_after(stored: int | None, write: Write) -> int | None:
    """How many artifact rows a task has once `write` is stored, of `stored` before it (None: unknown)."""
    return None if stored is None else stored + len(write.artifacts)


def creation_write(
    new: NewTask,
    now: datetime,
    role: str,
    lease: tuple[str, datetime] | None,
    traceparent: str | None,
    *,
    run_started: bool,
    exclusive: bool,
) -> tuple[Write, list[EventRecord]]:
    """A new task's rows and its `submitted` event: the task (held by `lease`'s holder until its expiry,
    when given; marked `run_started`, `exclusive`), its first message, the event, a webhook given with it
    and its outbox rows, the retry key and the Idempotency-Key."""
    task, owner = new.task, new.owner
    first = [EventRecord(1, StatusUpdate(task.id, task.context_id, task.status))]
    holder, expires = lease if lease is not None else (None, None)
    write = Write(
        new_task=rows.new_task(
            task,
            owner,
            now,
            holder,
            expires,
            new.retry_key,
            role,
            traceparent,
            run_started=run_started,
            exclusive=exclusive,
        ),
        messages=[rows.message_row(task.id, owner, m, now) for m in task.history],
        events=rows.event_rows(task.id, first, now),
        idempotency_key=new.key_row,
    )
    if new.push is not None:
        write.push_configs.append(new_row(owner, task.id, new.push, now))
        write.notifications = payloads.notifications(task, first, [], now)
    return write, first
