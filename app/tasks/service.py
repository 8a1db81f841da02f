"""The task service: send, stream, get, cancel, resubscribe, and applying events to tasks.

Every change of a task goes through `_apply` on the task's `LiveTask`: it checks the state machine,
numbers the events, commits them (with the status, history and artifact rows they imply) through the
group-commit writer, updates the in-memory snapshot, and only then rings the bus. One process writes a
task at a time, so the in-memory sequence number is the truth between commits.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

import orjson

from app.bus.base import RESYNC, Bus, Subscription
from app.protocol import errors
from app.protocol.errors import (
    A2AError,
    DatabaseUnavailableError,
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
    status_update,
    utcnow,
)
from app.push import payloads, ssrf
from app.push.configs import PushConfigs, new_row
from app.store.idempotency import IdemKey, IdempotencyKeys
from app.store.leases import Held, Leases
from app.store.outage import OutageLog, backoff, is_unavailable
from app.store.repo import InvalidPageToken, Repository, TaskHead, TaskPage
from app.store.writer import ConflictError, Write, Writer

from .state import check_transition

log = logging.getLogger(__name__)

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES
_T = TypeVar("_T")
RUNNING_STATES = frozenset({TaskState.SUBMITTED, TaskState.WORKING})
"""While its task is in one of these, a copy of a message the task has taken is a retry: it attaches."""
MAX_KEY_CHARS = 256
MAX_ROUNDS = 16


class IdempotencyKeyReusedError(InvalidParamsError):
    """The Idempotency-Key was used before with another request: `-32602`, and 422 over REST."""

    http_status = 422


class _AlreadyApplied(Exception):
    """The follow-up is a retry of one the running task has taken: it is not applied again."""


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
    stalled: bool = False
    """Its run is waiting for the database to take its events: other writers fail at once, not queue."""
    artifact_rows: int | None = None
    """How many artifact rows the task has stored (None: unknown). When it ends with exactly one row per
    artifact, its rows are already folded and the compaction is skipped."""

    def snapshot(self) -> Snapshot:
        return Snapshot(self.task.with_history(None), self.seq)


def _transition_rows(transitions: Iterable[StateTransition]) -> list[dict[str, str]]:
    return [{"state": t.state.value, "timestamp": t.timestamp} for t in transitions]


class HeldElsewhereError(Exception):
    """Another replica holds the task's lease: only it may write the task."""

    def __init__(self, replica_id: str) -> None:
        super().__init__(replica_id)
        self.replica_id = replica_id


class UnrecordedError(Exception):
    """A run's events could not be committed within the outage grace: the database stayed away."""


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
        push_policy: ssrf.Policy | None = None,
        max_history: int | None = None,
        keys: IdempotencyKeys | None = None,
        outage_grace_s: float = 120.0,
    ):
        self.repo = repo
        self.keys = keys
        """Where Idempotency-Keys are kept; None: the header is ignored."""
        self.push_configs = push_configs
        self.push_policy = push_policy or ssrf.Policy()
        self.push_ring: Callable[[], None] | None = None
        """Rung after a commit that wrote notifications: the local delivery worker looks at once."""
        self.writer = writer
        self.bus = bus
        self.leases = leases
        self.replica_id = leases.replica_id
        self.blocking_timeout_s = blocking_timeout_s
        self.max_history = max_history
        """Most history messages any read returns (None: all)."""
        self.outage_grace_s = outage_grace_s
        """How long a run's commit waits for a database that is away before the run gives up."""
        self.executor: Executor | None = None
        self._live: dict[str, LiveTask] = {}
        self._runs_outage = OutageLog("task runs")
        self._readers_outage = OutageLog("stream readers")
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
        self,
        live: LiveTask,
        events: list[Event],
        messages: Iterable[Message] = (),
        admit: Callable[[Task], None] | None = None,
        key_row: dict[str, Any] | None = None,
        wait: bool = False,
    ) -> list[EventRecord]:
        """Commit `events` (and user `messages`, and an Idempotency-Key naming the task) to the task, then
        publish them. `admit` sees the task under its lock first and may refuse by raising.

        Events for a task that has already ended are dropped: nothing leaves a terminal state. With
        `wait` (the task's own run) a database that is away is waited for (`_commit`); a request instead
        fails at once, also when the run is waiting out an outage on this task.
        """
        if live.stalled and not wait:
            raise DatabaseUnavailableError()
        async with live.lock:
            task = live.task
            if admit is not None:
                admit(task)
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
            write.idempotency_key = key_row
            ended = state.terminal
            rows = None if live.artifact_rows is None else live.artifact_rows + len(write.artifacts)
            if ended:
                folded = _folded_rows(task, events)
                if rows != len(folded):
                    write.folded_artifacts = folded
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
                await self._commit(live, write, wait)
            except ConflictError as exc:
                if not exc.duplicate_request:
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
            live.artifact_rows = rows
            if state.terminal:
                self._live.pop(task.id, None)
            self._wake_waiters(live)
        await self.bus.publish(task.id, task.context_id, records)
        return records

    async def _commit(self, live: LiveTask, write: Write, wait: bool) -> None:
        """Commit one step of the task. With `wait`, retry while the database is away, with backoff, for
        up to the outage grace (then UnrecordedError); the caller holds the task's lock, so its steps still
        commit in order. A retry that hits its own event numbers checks whether the first try did land
        (its answer lost with the connection) before calling it a conflict."""
        if not wait:
            await self.writer.commit(write)
            return
        deadline: float | None = None
        delay = 0.05
        try:
            while True:
                try:
                    await self.writer.commit(write)
                    break
                except ConflictError:
                    if deadline is not None and await self._landed(write):
                        break
                    raise
                except Exception as exc:
                    if not is_unavailable(exc):
                        raise
                    self._runs_outage.failed(exc)
                    live.stalled = True
                    now = time.monotonic()
                    deadline = deadline or now + self.outage_grace_s
                    if now >= deadline:
                        raise UnrecordedError(live.task.id) from exc
                    await asyncio.sleep(min(delay, deadline - now))
                    delay = backoff(delay)
            self._runs_outage.ok()
        finally:
            live.stalled = False

    async def _landed(self, write: Write) -> bool:
        """Whether `write` is what the database holds as the task's latest step."""
        assert write.task_update is not None
        try:
            stored = await self.leases.recorded(write.task_update["_id"])
        except Exception as exc:
            if is_unavailable(exc):
                return False
            raise
        return stored == (write.task_update["last_seq"], write.task_update["lease_owner"])

    def _wake_waiters(self, live: LiveTask) -> None:
        if live.waiters and live.task.status.state in STOP_STATES:
            snap = live.snapshot()
            for fut in live.waiters:
                if not fut.done():
                    fut.set_result(snap)
            live.waiters.clear()

    async def apply(self, task_id: str, events: list[Event]) -> bool:
        """Apply events produced by the task's run; True once the task has ended (or left us).

        Waits out a database outage up to the grace; raises UnrecordedError past it."""
        live = self._live.get(task_id)
        if live is None:
            return True
        try:
            await self._apply(live, events, wait=True)
        except ConflictError:
            return True
        return live.task.status.state.terminal

    async def fail(self, task_id: str, reason: str, wait: bool = False) -> None:
        """End the task `failed` with `reason` (with `wait`, as its run: waiting out an outage)."""
        live = self._live.get(task_id)
        if live is not None:
            event = status_update(task_id, live.task.context_id, TaskState.FAILED, reason)
            await self._apply(live, [event], wait=wait)

    def forget(self, task_id: str) -> None:
        """The task's run ended here without ending the task: stop holding it in memory, so reads come
        from the database and its lease, no longer renewed, expires for the reaper to act on."""
        live = self._live.get(task_id)
        if live is not None and not live.task.status.state.terminal:
            self._live.pop(task_id, None)

    # ---- send --------------------------------------------------------------------------------

    async def _submit(
        self, owner: str, message: Message, config: SendConfig, push: PushConfig | None, key: str | None
    ) -> str | Message:
        """Store a send (a new task, a follow-up), or find what an earlier copy of it made: the task's id,
        or the agent's direct reply.

        An earlier copy is the same Idempotency-Key with the same request, or the same first message (id,
        parts, taskId/contextId as sent) while the task it started still runs; any other reuse of a
        messageId is a new message. Of concurrent copies the database stores one; the others find it.
        """
        idem = self._idem(key, message, config, push)
        retry_key = None if message.task_id else _retry_key(message)
        sent = (message.task_id, message.context_id)
        # A running copy of a new message is found by the conflict of its retry key, so the common send
        # (no copy) costs no look-up. Each conflict is another copy that stored first; it repeats only while
        # copies keep finishing between our conflict and our look-up (each then a new message).
        # After MAX_ROUNDS of those, every copy we met had finished by our look-up: this one is stored as a
        # new message without a retry key, so it cannot conflict again (only its Idempotency-Key can, and
        # then `_earlier` finds the copy that stored it).
        running_copy: str | None = None
        rounds = 0
        while rounds < 2 * MAX_ROUNDS:
            message.task_id, message.context_id = sent
            try:
                earlier = await self._earlier(owner, idem, running_copy)
                if earlier is not None:
                    return earlier
                return await self._store(owner, message, push, idem, retry_key)
            except ConflictError as exc:
                if not exc.duplicate_request:
                    raise
                rounds += 1
                running_copy = retry_key
                if rounds >= MAX_ROUNDS:
                    retry_key = running_copy = None
        raise InternalError("Concurrent copies of this request kept conflicting; send it again")

    def _idem(
        self, key: str | None, message: Message, config: SendConfig, push: PushConfig | None
    ) -> IdemKey | None:
        """The request's Idempotency-Key (the draft's quoted sf-string or bare) with its fingerprint."""
        if key is None or self.keys is None:
            return None
        key = key.strip()
        if len(key) >= 2 and key[0] == key[-1] == '"':
            key = key[1:-1]
        if not key:
            return None
        if len(key) > MAX_KEY_CHARS:
            raise InvalidParamsError(f"Idempotency-Key may have at most {MAX_KEY_CHARS} characters")
        return IdemKey(key, _fingerprint(message, config, push))

    async def _earlier(self, owner: str, idem: IdemKey | None, retry_key: str | None) -> str | Message | None:
        """What an earlier copy of this send made, if there is one (see `_submit`): the Idempotency-Key's,
        else, given `retry_key`, the running task the same first message started."""
        if idem is not None and self.keys is not None:
            stored = await self.keys.find(owner, idem.key)
            if stored is not None:
                if stored.fingerprint != idem.fingerprint:
                    raise IdempotencyKeyReusedError(
                        f"Idempotency-Key {idem.key} was already used with a different request body",
                        {"idempotencyKey": idem.key},
                    )
                if stored.reply is not None:
                    return stored.reply
                if stored.task_id is not None:
                    return stored.task_id
        if retry_key is not None:
            task_id = await self.repo.find_retry(owner, retry_key)
            if task_id is not None:
                await self._remember(owner, idem, task_id=task_id)
                return task_id
        return None

    async def _remember(
        self, owner: str, idem: IdemKey | None, *, task_id: str | None = None, reply: Message | None = None
    ) -> None:
        """Store the Idempotency-Key on its own, for what was made without a task write of this request."""
        if idem is not None and self.keys is not None:
            await self.writer.commit(
                Write(idempotency_key=self.keys.row(owner, idem, task_id=task_id, reply=reply))
            )

    async def _store(
        self,
        owner: str,
        message: Message,
        push: PushConfig | None,
        idem: IdemKey | None,
        retry_key: str | None,
    ) -> str | Message:
        """The checks every send makes before anything is stored (the webhook even when the agent then
        answers directly and it has nothing to be told), then the follow-up, the agent's direct reply to
        a new message, or the new task. A contextId needs no check: contexts are per principal, so an id
        another principal also uses names this caller's own context (their tasks are never in it)."""
        if push is not None:
            await self._check_url(push.url)
        if message.task_id:
            if push is not None:
                await self.set_push_config(owner, message.task_id, push)
            return await self._continue(owner, message, idem=idem)
        if self.executor is not None:
            message.context_id = message.context_id or new_id()
            direct = await self.executor.reply(owner, message)
            if direct is not None:
                await self._remember(owner, idem, reply=direct)
                return direct
        return await self._accept(owner, message, push, idem, retry_key)

    async def _accept(
        self,
        owner: str,
        message: Message,
        push: PushConfig | None,
        idem: IdemKey | None,
        retry_key: str | None,
    ) -> str:
        """Store the message as a new task and start the agent; returns the task's id.

        A webhook given with the message (already checked) is stored with the task, and so are the
        message's retry key and the Idempotency-Key: ConflictError when a concurrent copy stored them first.
        """
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
                "retry_key": retry_key,
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
        write.idempotency_key = self._key_row(owner, idem, task_id)
        try:
            await self.writer.commit(write)
        except BaseException:
            if here:
                self.executor.release_slot()  # type: ignore[union-attr]
            raise
        if write.notifications and self.push_ring is not None:
            self.push_ring()
        await self.bus.publish(task_id, context_id, [EventRecord(1, submitted)])
        if here:
            self._live[task_id] = LiveTask(task, owner, 1, push is not None, artifact_rows=0)
            self.executor.start(task_id, reserved=True)  # type: ignore[union-attr]
        else:
            await self.bus.ring_queue()
        return task_id

    def _key_row(self, owner: str, idem: IdemKey | None, task_id: str) -> dict[str, Any] | None:
        return self.keys.row(owner, idem, task_id=task_id) if idem is not None and self.keys else None

    async def _continue(
        self, owner: str, message: Message, hops: int = 0, idem: IdemKey | None = None
    ) -> str:
        """A follow-up to an existing task: only a task waiting for input takes one. A copy of one it has
        taken (same messageId and parts) while it runs is a retry: it attaches, nothing is applied again."""
        assert message.task_id is not None
        try:
            live = await self._writable(owner, message.task_id)
        except HeldElsewhereError as held:
            if hops:
                raise InternalError() from None
            await self._forward(
                held.replica_id, {"op": "answer", "owner": owner, "message": message.to_store()}
            )
            await self._remember(owner, idem, task_id=message.task_id)
            return message.task_id
        task = live.task
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"contextId {message.context_id} does not match task {task.id}'s context {task.context_id}",
                {"taskId": task.id},
            )
        message.context_id = task.context_id

        def admit(task: Task) -> None:
            state = task.status.state
            if state in RUNNING_STATES and _in_history(task, message):
                raise _AlreadyApplied

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
            records = await self._apply(
                live, [working], [message], admit, self._key_row(owner, idem, task.id)
            )
        except _AlreadyApplied:
            await self._remember(owner, idem, task_id=task.id)
            return task.id
        if not records:
            raise UnsupportedOperationError(
                f"Task {task.id} has finished; it takes no more messages", {"taskId": task.id}
            )
        if self.executor is not None:
            await self.executor.answer(task.id, message)
        return task.id

    async def send(
        self,
        owner: str,
        message: Message,
        config: SendConfig,
        push: PushConfig | None = None,
        key: str | None = None,
    ) -> Task | Message:
        """`message/send`: the agent's direct Message, or the task at a terminal or interrupted state
        (at once if non-blocking). A retry (see `_submit`) gets what its first copy made, as it stands;
        `key` is the request's Idempotency-Key."""
        made = await self._submit(owner, message, config, push, key)
        if isinstance(made, Message):
            return made
        if not config.blocking:
            return (await self._load(owner, made)).task
        return self._clip(await self.wait_stopped(owner, made))

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
        self,
        owner: str,
        message: Message,
        push: PushConfig | None = None,
        config: SendConfig | None = None,
        key: str | None = None,
    ) -> AsyncIterator[Snapshot | EventRecord | Message]:
        """`message/stream`: validates and stores first (errors raise here), then yields events; a
        direct reply from the agent is the only item. A retry follows the task its first copy made."""
        made = await self._submit(owner, message, config or SendConfig(), push, key)
        if isinstance(made, Message):
            return _single(made)
        return self.follow(owner, made)

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
                snap = await self._reading(lambda: self._load(owner, task_id))
                context_id = snap.task.context_id
                yield snap
                expected = snap.seq + 1
                if snap.task.status.state in stop_at:
                    return
            else:
                head = await self._reading(lambda: self.head(owner, task_id))
                context_id = head.context_id
                expected = after + 1
                for rec in await self._log_after(owner, task_id, context_id, after):
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
        """The log after `after`, waiting while the database is out of reach."""
        return await self._reading(lambda: self.repo.events_after(task_id, context_id, after, owner=owner))

    async def _reading(self, read: Callable[[], Awaitable[_T]]) -> _T:
        """A stream's read, retried with backoff while the database is away (a restart, an outage, or a
        burst of readers resyncing at once after a Redis reconnect exhausting the pool for a moment):
        the stream stays open on keep-alives meanwhile and goes on, from where it was, once it is back."""
        delay = 0.05
        while True:
            try:
                result = await read()
            except Exception as exc:
                if not is_unavailable(exc):
                    raise
                self._readers_outage.failed(exc)
                await asyncio.sleep(delay)
                delay = backoff(delay, cap=2.0)
                continue
            self._readers_outage.ok()
            return result

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
            await ssrf.check(url, self.push_policy)
        except ssrf.Refused as exc:
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
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            err = DatabaseUnavailableError()
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


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def _retry_key(message: Message) -> str:
    """A new message as its retry is recognised: messageId, parts, and taskId/contextId as sent."""
    parts = [p.to_store() for p in message.parts]
    return _digest([message.message_id, parts, message.task_id, message.context_id])


def _fingerprint(message: Message, config: SendConfig, push: PushConfig | None) -> str:
    """What an Idempotency-Key's request asked, whatever the wire version or binding: the message, the
    webhook and the result's shape (`blocking` only changes how long the answer waits)."""
    body = message.to_store()
    body.pop("requestedExtensions", None)
    return _digest([body, config.history_length, config.accepted_output_modes, push])


def _in_history(task: Task, message: Message) -> bool:
    """Whether the task has taken this user message (same messageId and parts)."""
    parts = [p.to_store() for p in message.parts]
    return any(
        m.role is Role.USER
        and m.message_id == message.message_id
        and [p.to_store() for p in m.parts] == parts
        for m in task.history
    )


def _message_row(task_id: str, owner: str, m: Message, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "owner": owner,
        "message_id": m.message_id,
        "role": m.role.value,
        "body": m.to_store(),
        "created_at": now,
    }
