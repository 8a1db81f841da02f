"""The task service: send, stream, get, cancel, resubscribe, and applying events to tasks.

Every change of a task goes through `_apply` on the task's `LiveTask`: it checks the state machine,
numbers the events, commits them (with the status, history and artifact rows they imply) through the
group-commit writer, updates the in-memory snapshot, and only then rings the bus. One process writes a
task at a time, so the in-memory sequence number is the truth between commits.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from app.bus.base import RESYNC, Bus, Subscription
from app.protocol import errors
from app.protocol.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from app.protocol.model import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Artifact,
    ArtifactUpdate,
    Event,
    EventRecord,
    Message,
    PushConfig,
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
    status_update,
    utcnow,
)
from app.push import guard, payloads
from app.push.configs import PushConfigs, new_row
from app.store.leases import Held, Leases
from app.store.repo import InvalidPageToken, Repository, TaskHead, TaskPage
from app.store.writer import ConflictError, Write, Writer

from .state import check_transition

log = logging.getLogger(__name__)

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES


class Executor(Protocol):
    """Runs agents for tasks; the runner implements it."""

    def reserve(self) -> bool:
        """Take one agent slot for a task about to start here; False when all are busy."""
        ...

    def start(self, task_id: str, reserved: bool = False) -> None: ...

    async def stop(self, task_id: str) -> None: ...

    async def answer(self, task_id: str, message: Message) -> None: ...

    async def reply(self, owner: str, message: Message) -> Message | None:
        """The agent's direct Message for a new message, when it answers without a task."""
        ...


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
    push: bool = False
    """The task has webhooks: its events also go to the push outbox (built only then)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: list[asyncio.Future[Snapshot]] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        return Snapshot(self.task.with_history(None), self.seq)


def _transition_rows(transitions: Iterable[StateTransition]) -> list[dict[str, str]]:
    return [{"state": t.state.value, "timestamp": t.timestamp} for t in transitions]


class HeldElsewhereError(Exception):
    """Another replica holds the task's lease: only it may write the task."""

    def __init__(self, replica_id: str) -> None:
        super().__init__(replica_id)
        self.replica_id = replica_id


CONTROL_TIMEOUT_S = 5.0


class TaskService:
    def __init__(
        self,
        repo: Repository,
        writer: Writer,
        bus: Bus,
        leases: Leases,
        blocking_timeout_s: float,
        push_configs: PushConfigs | None = None,
        push_policy: guard.Policy | None = None,
        max_history: int | None = None,
    ):
        self.repo = repo
        self.push_configs = push_configs
        self.push_policy = push_policy or guard.Policy()
        self.push_ring: Callable[[], None] | None = None
        """Rung after a commit that wrote notifications: the local delivery worker looks at once."""
        self.writer = writer
        self.bus = bus
        self.leases = leases
        self.replica_id = leases.replica_id
        self.blocking_timeout_s = blocking_timeout_s
        self.max_history = max_history
        """Most history messages any read returns (None: all)."""
        self.executor: Executor | None = None
        self._live: dict[str, LiveTask] = {}
        bus.on_control(self.handle_control)

    # ---- reads -------------------------------------------------------------------------------

    def live(self, task_id: str) -> LiveTask | None:
        return self._live.get(task_id)

    def _limit(self, history_length: int | None = None) -> int | None:
        """How many history messages a read returns: the caller's historyLength within the server's cap."""
        if history_length is None:
            return self.max_history
        history_length = max(history_length, 0)
        return history_length if self.max_history is None else min(history_length, self.max_history)

    def _clip(self, task: Task, history_length: int | None = None) -> Task:
        limit = self._limit(history_length)
        return task if limit is None else task.with_history(limit)

    async def _load(self, owner: str, task_id: str, history_length: int | None = None) -> Snapshot:
        """The task as its owner may see it; someone else's task does not exist for them."""
        live = self._live.get(task_id)
        if live is not None:
            if live.owner != owner:
                raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
            snap = live.snapshot()
            return Snapshot(self._clip(snap.task, history_length), snap.seq)
        stored = await self.repo.get_task(task_id, owner=owner, history=self._limit(history_length))
        if stored is None or stored.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return Snapshot(stored.task, stored.last_seq)

    async def head(self, owner: str, task_id: str) -> TaskHead:
        """The task's context, state and last event number: its row only, never its history or artifacts."""
        live = self._live.get(task_id)
        if live is not None and live.owner == owner:
            return TaskHead(live.task.context_id, live.task.status.state, live.seq)
        head = await self.repo.task_head(task_id, owner=owner)
        if head is None:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return head

    async def _writable(self, owner: str, task_id: str) -> LiveTask:
        """The task for writing: held here already, or its lease taken now.

        Raises HeldElsewhereError when another live replica holds it. A finished task comes back
        unregistered (no lease needed) so callers can answer with the right error.
        """
        live = self._live.get(task_id)
        if live is None:
            # Every query names the owner: another principal's task is neither leased nor revealed.
            took = await self.leases.take(task_id, owner=owner)
            if not took:
                holder = await self.leases.holder(task_id, owner=owner)
                if holder is not None and holder != self.replica_id:
                    raise HeldElsewhereError(holder)
            stored = await self.repo.get_task(task_id, owner=owner, to_write=True)
            live = self._live.get(task_id)
            if live is None:
                if stored is None:
                    raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
                live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push)
                if took and not stored.task.status.state.terminal:
                    self._live[task_id] = live
        if live.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return live

    async def get(self, owner: str, task_id: str, history_length: int | None = None) -> Task:
        """The task with its last `history_length` messages (None: as many as the server returns)."""
        return (await self._load(owner, task_id, history_length)).task

    async def list(
        self,
        owner: str,
        *,
        context_id: str | None = None,
        state: TaskState | None = None,
        after: str | None = None,
        page_size: int = 50,
        page_token: str | None = None,
        include_artifacts: bool = False,
        history_length: int | None = None,
    ) -> TaskPage:
        """The caller's own tasks, newest status first, a page at a time."""
        try:
            page = await self.repo.list_tasks(
                owner,
                context_id=context_id,
                state=state,
                after=after,
                page_size=page_size,
                page_token=page_token,
                artifacts=include_artifacts,
                history=self._limit(history_length),
            )
        except InvalidPageToken:
            raise InvalidParamsError("pageToken is not one this server issued") from None
        return page

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
            user_messages = list(messages)
            history_add = list(user_messages)
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
            if live.push:
                write.notifications = payloads.notifications(task, records, user_messages, now)
            ended = state.terminal
            if ended:
                write.folded_artifacts = _folded_rows(task, events)
            write.task_update = {
                "_id": task.id,
                "state": state.value,
                "status": status.to_store(),
                "transitions": _transition_rows(transitions),
                "last_seq": seq,
                "updated_at": now,
                "status_at": status.timestamp,
                "lease_owner": None if ended else self.replica_id,
                "lease_expires_at": None if ended else self.leases.expiry(now),
            }
            try:
                await self.writer.commit(write)
            except ConflictError as exc:
                if not exc.duplicate_message:
                    # Our next event number is taken: another replica took this task over.
                    self._live.pop(task.id, None)
                    log.warning("task %s was taken over by another replica; dropping it here", task.id)
                raise
            if write.notifications and self.push_ring is not None:
                self.push_ring()
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
        await self.bus.publish(task.id, task.context_id, records)
        return records

    def _wake_waiters(self, live: LiveTask) -> None:
        if live.waiters and live.task.status.state in STOP_STATES:
            snap = live.snapshot()
            for fut in live.waiters:
                if not fut.done():
                    fut.set_result(snap)
            live.waiters.clear()

    async def apply(self, task_id: str, events: list[Event]) -> bool:
        """Apply events produced by the task's run; True once the task has ended (or left us)."""
        live = self._live.get(task_id)
        if live is None:
            return True
        try:
            await self._apply(live, events)
        except ConflictError:
            return True
        return live.task.status.state.terminal

    async def fail(self, task_id: str, reason: str) -> None:
        live = self._live.get(task_id)
        if live is not None:
            await self._apply(live, [status_update(task_id, live.task.context_id, TaskState.FAILED, reason)])

    # ---- send --------------------------------------------------------------------------------

    async def _accept(self, owner: str, message: Message, push: PushConfig | None = None) -> tuple[str, bool]:
        """Store the message as a new task or as the answer to a waiting one; start the agent.

        A webhook given with the message (already checked by the caller) is stored with the task, or
        added to the task the message continues. Returns the task id and whether it was a repeat.
        """
        if message.task_id:
            if push is not None:
                await self.set_push_config(owner, message.task_id, push)
            return await self._continue(owner, message)
        task_id = new_id()
        context_id = message.context_id or new_id()
        message.task_id = task_id
        message.context_id = context_id
        now = utcnow()
        here = self.executor is not None and self.executor.reserve()
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
                "status_at": status.timestamp,
                "lease_owner": self.replica_id if here else None,
                "lease_expires_at": self.leases.expiry(now) if here else None,
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
        if push is not None:
            write.push_configs.append(new_row(owner, task_id, push, now))
            write.notifications = payloads.notifications(task, [EventRecord(1, submitted)], [], now)
        try:
            await self.writer.commit(write)
        except ConflictError:
            if here:
                self.executor.release_slot()  # type: ignore[union-attr]
            return await self._existing(owner, message.message_id), True
        except BaseException:
            if here:
                self.executor.release_slot()  # type: ignore[union-attr]
            raise
        if write.notifications and self.push_ring is not None:
            self.push_ring()
        await self.bus.publish(task_id, context_id, [EventRecord(1, submitted)])
        if here:
            self._live[task_id] = LiveTask(task, owner, 1, push is not None)
            self.executor.start(task_id, reserved=True)  # type: ignore[union-attr]
        else:
            await self.bus.ring_queue()
        return task_id, False

    async def _existing(self, owner: str, message_id: str) -> str:
        task_id = await self.repo.find_message_task(owner, message_id)
        if task_id is None:
            raise InvalidParamsError(f"messageId {message_id} is already in use")
        return task_id

    async def _continue(self, owner: str, message: Message, hops: int = 0) -> tuple[str, bool]:
        """A follow-up to an existing task: only a task waiting for input takes one."""
        assert message.task_id is not None
        repeated = await self.repo.find_message_task(owner, message.message_id)
        if repeated is not None:
            return repeated, True
        try:
            live = await self._writable(owner, message.task_id)
        except HeldElsewhereError as held:
            if hops:
                raise InternalError() from None
            await self._forward(
                held.replica_id, {"op": "answer", "owner": owner, "message": message.to_store()}
            )
            return message.task_id, False
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
        except ConflictError:
            return await self._existing(owner, message.message_id), True
        if not records:
            raise UnsupportedOperationError(
                f"Task {task.id} has finished; it takes no more messages", {"taskId": task.id}
            )
        if self.executor is not None:
            await self.executor.answer(task.id, message)
        return task.id, False

    async def _prepare(self, owner: str, message: Message, push: PushConfig | None) -> Message | None:
        """The checks every send makes before anything is stored (the webhook even when the agent then
        answers directly and it has nothing to be told), then the agent's quick reply to a new message:
        a Message back means no task is made.

        A contextId needs no check: contexts are per principal, so an id another principal also uses
        names this caller's own context (their tasks are never in it)."""
        if push is not None:
            await self._check_url(push.url)
        if message.task_id or self.executor is None:
            return None
        message.context_id = message.context_id or new_id()
        return await self.executor.reply(owner, message)

    async def send(
        self, owner: str, message: Message, config: SendConfig, push: PushConfig | None = None
    ) -> Task | Message:
        """`message/send`: the agent's direct Message, or the task at a terminal or interrupted state
        (at once if non-blocking)."""
        if (direct := await self._prepare(owner, message, push)) is not None:
            return direct
        task_id, _ = await self._accept(owner, message, push)
        if not config.blocking:
            return (await self._load(owner, task_id)).task
        return self._clip(await self.wait_stopped(owner, task_id))

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

    async def stream(
        self, owner: str, message: Message, push: PushConfig | None = None
    ) -> AsyncIterator[Snapshot | EventRecord | Message]:
        """`message/stream`: validates and stores first (errors raise here), then yields events; a
        direct reply from the agent is the only item."""
        if (direct := await self._prepare(owner, message, push)) is not None:
            return _single(direct)
        task_id, _ = await self._accept(owner, message, push)
        return self.follow(owner, task_id)

    async def resubscribe(
        self, owner: str, task_id: str, after: int | None = None
    ) -> AsyncIterator[Snapshot | EventRecord]:
        """Follow the task (an unknown task raises here, before the stream starts)."""
        await self.head(owner, task_id)
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
        skipped and the events after that sequence number are replayed from the log instead (only the
        task's row and those events are read).
        """
        sub = await self.bus.subscribe(task_id)
        try:
            if after is None:
                snap = await self._load(owner, task_id)
                context_id = snap.task.context_id
                yield snap
                expected = snap.seq + 1
                if snap.task.status.state in stop_at:
                    return
            else:
                head = await self.head(owner, task_id)
                context_id = head.context_id
                expected = after + 1
                for rec in await self.repo.events_after(task_id, context_id, after, owner=owner):
                    yield rec
                    expected = rec.seq + 1
                    if _stops(rec, stop_at):
                        return
                if head.state in stop_at and expected > head.last_seq:
                    return
            async for rec in self._tail(sub, owner, task_id, context_id, expected):
                yield rec
                if _stops(rec, stop_at):
                    return
        finally:
            await self.bus.unsubscribe(sub)

    async def _tail(
        self, sub: Subscription, owner: str, task_id: str, context_id: str, expected: int
    ) -> AsyncIterator[EventRecord]:
        """Live events from `expected` on: duplicates dropped, gaps and resyncs filled from the log."""
        while True:
            rec = await sub.get()
            if rec is RESYNC:
                for m in await self._log_after(owner, task_id, context_id, expected - 1):
                    yield m
                    expected = m.seq + 1
                continue
            if rec.seq < expected:
                continue
            if rec.seq > expected:
                for m in await self._log_after(owner, task_id, context_id, expected - 1):
                    if m.seq >= rec.seq:
                        break
                    yield m
            yield rec
            expected = rec.seq + 1

    async def _log_after(self, owner: str, task_id: str, context_id: str, after: int) -> list[EventRecord]:
        """The log after `after`, retried while the database is briefly out of reach (a burst of
        readers resyncing at once after a Redis reconnect can exhaust the pool for a moment)."""
        delay = 0.05
        while True:
            try:
                return await self.repo.events_after(task_id, context_id, after, owner=owner)
            except (OSError, SQLAlchemyError) as exc:
                log.warning("reading the event log of %s failed (%s); retrying", task_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # ---- cancel ------------------------------------------------------------------------------

    async def cancel(self, owner: str, task_id: str, hops: int = 0) -> Task:
        try:
            live = await self._writable(owner, task_id)
        except HeldElsewhereError as held:
            if hops:
                raise InternalError() from None
            await self._forward(held.replica_id, {"op": "cancel", "owner": owner, "task": task_id})
            return (await self._load(owner, task_id)).task
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

    # ---- push notification configs ---------------------------------------------------------------

    def _configs(self) -> PushConfigs:
        if self.push_configs is None:
            raise errors.PushNotificationNotSupportedError()
        return self.push_configs

    async def _check_url(self, url: str) -> None:
        """The SSRF guard at registration: a refused URL is the client's error, with the reason."""
        try:
            await guard.check(url, self.push_policy)
        except guard.Refused as exc:
            raise InvalidParamsError(f"Push notification URL refused: {exc}", {"url": url}) from None

    async def set_push_config(self, owner: str, task_id: str, config: PushConfig) -> PushConfig:
        """Add (or replace, by id) a webhook of the caller's task; its events from now on go to it."""
        configs = self._configs()
        await self._load(owner, task_id)
        await self._check_url(config.url)
        stored = await configs.put(owner, task_id, config)
        live = self._live.get(task_id)
        if live is not None:
            live.push = True
        else:
            holder = await self.leases.holder(task_id, owner=owner)
            if holder is not None and holder != self.replica_id:
                try:
                    await self.bus.request(holder, {"op": "push", "task": task_id}, CONTROL_TIMEOUT_S)
                except TimeoutError:
                    log.warning("replica %s did not hear of task %s's new webhook", holder, task_id)
        return stored

    async def get_push_config(self, owner: str, task_id: str, config_id: str | None) -> PushConfig:
        await self._load(owner, task_id)
        found = await self._configs().get(owner, task_id, config_id)
        if found is None:
            what = f"push notification config {config_id}" if config_id else "push notification config"
            raise TaskNotFoundError(
                f"Task {task_id} has no {what}", {"taskId": task_id, "configId": config_id or ""}
            )
        return found

    async def list_push_configs(
        self, owner: str, task_id: str, page_size: int | None = None, page_token: str | None = None
    ) -> tuple[list[PushConfig], str]:
        """The task's webhooks in creation order, a page at a time (the token is opaque)."""
        await self._load(owner, task_id)
        after = 0
        if page_token:
            try:
                after = int(base64.urlsafe_b64decode(page_token.encode()).decode())
            except (ValueError, UnicodeDecodeError):
                raise InvalidParamsError("pageToken is not one this server issued") from None
        configs, cursor = await self._configs().list(owner, task_id, page_size, after)
        token = base64.urlsafe_b64encode(str(cursor).encode()).decode() if cursor is not None else ""
        return configs, token

    async def delete_push_config(self, owner: str, task_id: str, config_id: str) -> None:
        """Remove a webhook and what it had not received yet; a second delete is a no-op."""
        await self._load(owner, task_id)
        await self._configs().delete(owner, task_id, config_id)

    # ---- control between replicas -------------------------------------------------------------

    async def _forward(self, replica_id: str, body: dict[str, Any]) -> None:
        """Have the replica holding the task do the write; its A2A error becomes ours."""
        try:
            reply = await self.bus.request(replica_id, body, CONTROL_TIMEOUT_S)
        except TimeoutError:
            raise InternalError(f"Replica {replica_id} running the task did not answer") from None
        err = reply.get("error")
        if err:
            cls = getattr(errors, err.get("type", ""), None)
            if not (isinstance(cls, type) and issubclass(cls, A2AError)):
                cls = InternalError
            raise cls(err.get("message"), err.get("data"))

    async def handle_control(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request from another replica about a task this one holds."""
        try:
            if body.get("op") == "cancel":
                await self.cancel(body["owner"], body["task"], hops=1)
            elif body.get("op") == "push":
                live = self._live.get(body["task"])
                if live is not None:
                    live.push = True
            elif body.get("op") == "answer":
                await self._continue(body["owner"], Message.from_store(body["message"]), hops=1)
            else:
                raise InvalidParamsError(f"unknown control op {body.get('op')!r}")
        except A2AError as err:
            return {"error": {"type": type(err).__name__, "message": err.message, "data": err.data}}
        return {"ok": True}

    # ---- leases: start-up, dead replicas -------------------------------------------------------

    async def adopt(self, task_id: str) -> bool:
        """Load a task this replica has just claimed so its run can start; False if it is gone."""
        if task_id in self._live:
            return True
        stored = await self.repo.get_task(task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return False
        self._live[task_id] = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push)
        return True

    async def end_lost(self, held: Held, reason: str) -> None:
        """Fail a task whose agent died with its replica, if this replica can take it."""
        if held.task_id in self._live or not await self.leases.take(held.task_id):
            return
        stored = await self.repo.get_task(held.task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return
        live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push)
        self._live[held.task_id] = live
        event = status_update(held.task_id, stored.task.context_id, TaskState.FAILED, reason)
        try:
            await self._apply(live, [event])
        except ConflictError:
            pass

    async def release(self, task_ids: list[str]) -> None:
        """Stop holding these tasks here: queued ones go back to the queue, waiting ones to anyone."""
        for task_id in task_ids:
            self._live.pop(task_id, None)
        await self.leases.release(task_ids)


async def _single(message: Message) -> AsyncIterator[Message]:
    yield message


def _stops(rec: EventRecord, stop_at: frozenset[TaskState]) -> bool:
    return isinstance(rec.event, StatusUpdate) and rec.event.status.state in stop_at


def _folded_rows(task: Task, events: list[Event]) -> list[dict[str, Any]]:
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


def _message_row(task_id: str, owner: str, m: Message, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "owner": owner,
        "message_id": m.message_id,
        "role": m.role.value,
        "body": m.to_store(),
        "created_at": now,
    }
