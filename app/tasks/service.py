"""The task service: send, stream, get, cancel, resubscribe, and applying events to tasks.

Every change of a task goes through `_apply` on the task's `LiveTask`: it checks the state machine,
numbers the events, commits them (with the status, history and artifact rows they imply) through the
group-commit writer, updates the in-memory snapshot, and only then rings the bus. One process writes a
task at a time, so the in-memory sequence number is the truth between commits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from app.bus.base import Bus, Subscription
from app.protocol.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from app.protocol.model import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    ArtifactUpdate,
    Event,
    EventRecord,
    Message,
    Part,
    Role,
    SendConfig,
    StateTransition,
    StatusUpdate,
    Task,
    TaskState,
    TaskStatus,
    event_kind,
    fold_artifact,
    iso,
    new_id,
    now_iso,
    utcnow,
)
from app.store.repo import Repository
from app.store.writer import DuplicateMessageError, Write, Writer

from .state import check_transition

log = logging.getLogger(__name__)

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES


class Executor(Protocol):
    """Runs agents for tasks; the runner implements it."""

    def start(self, task_id: str) -> None: ...

    async def stop(self, task_id: str) -> None: ...

    async def answer(self, task_id: str, message: Message) -> None: ...


def status_update(task_id: str, context_id: str, state: TaskState, text: str | None = None) -> StatusUpdate:
    """A status-update event, with an agent message when `text` is given; final when terminal."""
    message = None
    if text is not None:
        message = Message(
            message_id=new_id(),
            role=Role.AGENT,
            parts=[Part(text=text)],
            context_id=context_id,
            task_id=task_id,
        )
    return StatusUpdate(
        task_id=task_id,
        context_id=context_id,
        status=TaskStatus(state=state, timestamp=now_iso(), message=message),
        final=state.terminal,
    )


@dataclass(slots=True)
class Snapshot:
    """A task as of event `seq`: what a subscriber shows first before following the log."""

    task: Task
    seq: int


@dataclass(slots=True, eq=False)
class LiveTask:
    """A task this process writes: the in-memory truth between commits, serialised by `lock`."""

    task: Task
    owner: str
    seq: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: list[asyncio.Future[Snapshot]] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        return Snapshot(self.task.with_history(None), self.seq)


def _transition_rows(transitions: Iterable[StateTransition]) -> list[dict[str, str]]:
    return [{"state": t.state.value, "timestamp": t.timestamp} for t in transitions]


class TaskService:
    def __init__(self, repo: Repository, writer: Writer, bus: Bus, blocking_timeout_s: float):
        self.repo = repo
        self.writer = writer
        self.bus = bus
        self.blocking_timeout_s = blocking_timeout_s
        self.executor: Executor | None = None
        self._live: dict[str, LiveTask] = {}

    # ---- reads -------------------------------------------------------------------------------

    def live(self, task_id: str) -> LiveTask | None:
        return self._live.get(task_id)

    async def _load(self, owner: str, task_id: str) -> Snapshot:
        """The task as its owner may see it; someone else's task does not exist for them."""
        live = self._live.get(task_id)
        if live is not None:
            if live.owner != owner:
                raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
            return live.snapshot()
        stored = await self.repo.get_task(task_id)
        if stored is None or stored.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return Snapshot(stored.task, stored.last_seq)

    async def _hydrate(self, owner: str, task_id: str) -> LiveTask:
        """The LiveTask for `task_id`, loading it from the store when no run holds it here."""
        live = self._live.get(task_id)
        if live is None:
            stored = await self.repo.get_task(task_id)
            live = self._live.get(task_id)
            if live is None:
                if stored is None:
                    raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
                live = LiveTask(stored.task, stored.owner, stored.last_seq)
                if not stored.task.status.state.terminal:
                    self._live[task_id] = live
        if live.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return live

    async def get(self, owner: str, task_id: str) -> Task:
        return (await self._load(owner, task_id)).task

    # ---- writes ------------------------------------------------------------------------------

    async def _apply(
        self, live: LiveTask, events: list[Event], messages: Iterable[Message] = ()
    ) -> list[EventRecord]:
        """Commit `events` (and user `messages`) to the task, then publish them.

        Events for a task that has already ended are dropped: nothing leaves a terminal state.
        """
        async with live.lock:
            task = live.task
            state = task.status.state
            if state.terminal:
                return []
            now = utcnow()
            seq = live.seq
            status = task.status
            transitions = list(task.transitions)
            history_add = list(messages)
            records: list[EventRecord] = []
            write = Write()
            for ev in events:
                seq += 1
                records.append(EventRecord(seq, ev))
                write.events.append(
                    {
                        "task_id": task.id,
                        "seq": seq,
                        "kind": event_kind(ev),
                        "body": ev.to_store(),
                        "created_at": now,
                    }
                )
                if isinstance(ev, StatusUpdate):
                    check_transition(state, ev.status.state)
                    if ev.status.state != state:
                        transitions.append(StateTransition(ev.status.state, ev.status.timestamp))
                    state = ev.status.state
                    status = ev.status
                    if status.message is not None:
                        history_add.append(status.message)
                else:
                    write.artifacts.append(
                        {
                            "task_id": task.id,
                            "seq": seq,
                            "artifact_id": ev.artifact.artifact_id,
                            "append": ev.append,
                            "body": ev.artifact.to_store(),
                        }
                    )
            for m in history_add:
                write.messages.append(_message_row(task.id, live.owner, m, now))
            write.task_update = {
                "_id": task.id,
                "state": state.value,
                "status": status.to_store(),
                "transitions": _transition_rows(transitions),
                "last_seq": seq,
                "updated_at": now,
            }
            await self.writer.commit(write)
            task.status = status
            task.transitions = transitions
            task.history.extend(history_add)
            for ev in events:
                if isinstance(ev, ArtifactUpdate):
                    fold_artifact(task.artifacts, ev)
            live.seq = seq
            if state.terminal:
                self._live.pop(task.id, None)
            self._wake_waiters(live)
        await self.bus.publish(task.id, records)
        return records

    def _wake_waiters(self, live: LiveTask) -> None:
        if live.waiters and live.task.status.state in STOP_STATES:
            snap = live.snapshot()
            for fut in live.waiters:
                if not fut.done():
                    fut.set_result(snap)
            live.waiters.clear()

    async def apply(self, task_id: str, events: list[Event]) -> bool:
        """Apply events produced by the task's run; True once the task has ended."""
        live = self._live.get(task_id)
        if live is None:
            return True
        await self._apply(live, events)
        return live.task.status.state.terminal

    async def fail(self, task_id: str, reason: str) -> None:
        live = self._live.get(task_id)
        if live is not None:
            await self._apply(live, [status_update(task_id, live.task.context_id, TaskState.FAILED, reason)])

    # ---- send --------------------------------------------------------------------------------

    async def _accept(self, owner: str, message: Message) -> tuple[str, bool]:
        """Store the message as a new task or as the answer to a waiting one; start the agent.

        Returns the task id and whether the message was a repeat of one already stored.
        """
        if message.task_id:
            return await self._continue(owner, message)
        task_id = new_id()
        context_id = message.context_id or new_id()
        message.task_id = task_id
        message.context_id = context_id
        now = utcnow()
        status = TaskStatus(TaskState.SUBMITTED, iso(now))
        submitted = StatusUpdate(task_id, context_id, status)
        task = Task(
            id=task_id,
            context_id=context_id,
            status=status,
            history=[message],
            transitions=[StateTransition(TaskState.SUBMITTED, status.timestamp)],
        )
        write = Write(
            new_task={
                "id": task_id,
                "context_id": context_id,
                "owner": owner,
                "state": status.state.value,
                "status": status.to_store(),
                "transitions": _transition_rows(task.transitions),
                "metadata": None,
                "last_seq": 1,
                "created_at": now,
                "updated_at": now,
            },
            messages=[_message_row(task_id, owner, message, now)],
            events=[
                {
                    "task_id": task_id,
                    "seq": 1,
                    "kind": "status",
                    "body": submitted.to_store(),
                    "created_at": now,
                }
            ],
        )
        try:
            await self.writer.commit(write)
        except DuplicateMessageError:
            return await self._existing(owner, message.message_id), True
        self._live[task_id] = LiveTask(task, owner, 1)
        await self.bus.publish(task_id, [EventRecord(1, submitted)])
        if self.executor is not None:
            self.executor.start(task_id)
        return task_id, False

    async def _existing(self, owner: str, message_id: str) -> str:
        task_id = await self.repo.find_message_task(owner, message_id)
        if task_id is None:
            raise InvalidParamsError(f"messageId {message_id} is already in use")
        return task_id

    async def _continue(self, owner: str, message: Message) -> tuple[str, bool]:
        """A follow-up to an existing task: only a task waiting for input takes one."""
        assert message.task_id is not None
        repeated = await self.repo.find_message_task(owner, message.message_id)
        if repeated is not None:
            return repeated, True
        live = await self._hydrate(owner, message.task_id)
        task = live.task
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"contextId {message.context_id} does not match task {task.id}'s context {task.context_id}",
                {"taskId": task.id},
            )
        message.context_id = task.context_id
        state = task.status.state
        if state.terminal:
            raise UnsupportedOperationError(
                f"Task {task.id} is {state.value}; a finished task takes no more messages",
                {"taskId": task.id},
            )
        if state not in INTERRUPTED_STATES:
            raise UnsupportedOperationError(
                f"Task {task.id} is {state.value}; only a task waiting for input takes a follow-up",
                {"taskId": task.id},
            )
        working = status_update(task.id, task.context_id, TaskState.WORKING)
        try:
            records = await self._apply(live, [working], [message])
        except DuplicateMessageError:
            return await self._existing(owner, message.message_id), True
        if not records:
            raise UnsupportedOperationError(
                f"Task {task.id} has finished; it takes no more messages", {"taskId": task.id}
            )
        if self.executor is not None:
            await self.executor.answer(task.id, message)
        return task.id, False

    async def send(self, owner: str, message: Message, config: SendConfig) -> Task:
        """`message/send`: returns at a terminal or interrupted state, or at once if non-blocking."""
        task_id, _ = await self._accept(owner, message)
        if not config.blocking:
            return (await self._load(owner, task_id)).task
        return await self.wait_stopped(owner, task_id)

    async def wait_stopped(self, owner: str, task_id: str) -> Task:
        """The task once it is terminal or waiting for input (or as it stands at the timeout)."""
        live = self._live.get(task_id)
        if live is not None and live.owner == owner:
            if live.task.status.state in STOP_STATES:
                return live.snapshot().task
            fut: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
            live.waiters.append(fut)
            try:
                return (await asyncio.wait_for(fut, self.blocking_timeout_s)).task
            except TimeoutError:
                return (await self._load(owner, task_id)).task
        try:
            async with asyncio.timeout(self.blocking_timeout_s):
                async for item in self.follow(owner, task_id, stop_at=STOP_STATES):
                    if isinstance(item, EventRecord):
                        continue
                    if item.task.status.state in STOP_STATES:
                        return item.task
        except TimeoutError:
            pass
        return (await self._load(owner, task_id)).task

    async def stream(self, owner: str, message: Message) -> AsyncIterator[Snapshot | EventRecord]:
        """`message/stream`: validates and stores first (errors raise here), then yields events."""
        task_id, _ = await self._accept(owner, message)
        return self.follow(owner, task_id)

    async def resubscribe(
        self, owner: str, task_id: str, after: int | None = None
    ) -> AsyncIterator[Snapshot | EventRecord]:
        await self._load(owner, task_id)
        return self.follow(owner, task_id, after=after)

    async def follow(
        self,
        owner: str,
        task_id: str,
        after: int | None = None,
        stop_at: frozenset[TaskState] = TERMINAL_STATES,
    ) -> AsyncIterator[Snapshot | EventRecord]:
        """The task's snapshot, then every later event once and in order, until a stop state.

        Subscribe first, then read the snapshot, then drop what the snapshot already holds; a gap in
        the sequence (lag, a lost message) is filled from the event log. With `after`, the snapshot is
        skipped and the events after that sequence number are replayed from the log instead.
        """
        sub = self.bus.subscribe(task_id)
        try:
            snap = await self._load(owner, task_id)
            context_id = snap.task.context_id
            if after is None:
                yield snap
                expected = snap.seq + 1
                if snap.task.status.state in stop_at:
                    return
            else:
                expected = after + 1
                for rec in await self.repo.events_after(task_id, context_id, after):
                    yield rec
                    expected = rec.seq + 1
                    if _stops(rec, stop_at):
                        return
                if snap.task.status.state in stop_at and expected > snap.seq:
                    return
            async for rec in self._tail(sub, task_id, context_id, expected):
                yield rec
                if _stops(rec, stop_at):
                    return
        finally:
            self.bus.unsubscribe(sub)

    async def _tail(
        self, sub: Subscription, task_id: str, context_id: str, expected: int
    ) -> AsyncIterator[EventRecord]:
        while True:
            rec = await sub.get()
            if sub.lagged:
                sub.lagged = False
                sub.drain()
                missing = await self.repo.events_after(task_id, context_id, expected - 1)
                for m in missing:
                    yield m
                    expected = m.seq + 1
                if rec.seq < expected:
                    continue
            if rec.seq < expected:
                continue
            if rec.seq > expected:
                for m in await self.repo.events_after(task_id, context_id, expected - 1):
                    if m.seq >= rec.seq:
                        break
                    yield m
            yield rec
            expected = rec.seq + 1

    # ---- cancel ------------------------------------------------------------------------------

    async def cancel(self, owner: str, task_id: str) -> Task:
        live = await self._hydrate(owner, task_id)
        state = live.task.status.state
        if state.terminal:
            raise TaskNotCancelableError(
                f"Task {task_id} is already {state.value} and cannot be canceled",
                {"taskId": task_id},
            )
        event = status_update(
            task_id, live.task.context_id, TaskState.CANCELED, "Task canceled by the client"
        )
        records = await self._apply(live, [event])
        if not records:
            state = live.task.status.state
            raise TaskNotCancelableError(
                f"Task {task_id} is already {state.value} and cannot be canceled",
                {"taskId": task_id},
            )
        if self.executor is not None:
            await self.executor.stop(task_id)
        return live.snapshot().task

    # ---- start-up ----------------------------------------------------------------------------

    async def recover(self) -> None:
        """After a restart: fail what was running (its agent died with the process), rerun the queued."""
        for task_id, state in await self.repo.task_ids_in_states([TaskState.SUBMITTED, TaskState.WORKING]):
            stored = await self.repo.get_task(task_id)
            if stored is None:
                continue
            live = LiveTask(stored.task, stored.owner, stored.last_seq)
            self._live[task_id] = live
            if state is TaskState.WORKING:
                reason = "The server restarted while this task was running; its agent was lost."
                await self._apply(
                    live, [status_update(task_id, stored.task.context_id, TaskState.FAILED, reason)]
                )
            elif self.executor is not None:
                self.executor.start(task_id)


def _stops(rec: EventRecord, stop_at: frozenset[TaskState]) -> bool:
    return isinstance(rec.event, StatusUpdate) and rec.event.status.state in stop_at


def _message_row(task_id: str, owner: str, m: Message, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "owner": owner,
        "message_id": m.message_id,
        "role": m.role.value,
        "body": m.to_store(),
        "created_at": now,
    }
