"""The tasks this process writes, and the one way to change them.

Every change of a task goes through `LiveTasks.apply` on the task's `LiveTask`: it checks the state machine,
numbers the events, commits them (with the status, history and artifact rows they imply, and the usage a
status event reports: its `task_usage` rows and the task's summed `metadata.usage`) through the
group-commit writer, updates the in-memory snapshot, wakes the requests waiting for it to stop, and only
then rings the bus. One process writes a task at a time, so the in-memory sequence number is the truth
between commits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.bus.base import Bus
from app.protocol.errors import DatabaseUnavailableError, TaskNotFoundError
from app.protocol.model import (
    INTERRUPTED_STATES,
    SESSION_KEY,
    TERMINAL_STATES,
    ArtifactUpdate,
    EventRecord,
    StateTransition,
    StatusUpdate,
    TaskState,
    fold_artifact,
    session_of,
    status_update,
    utcnow,
)
from app.protocol.usage import TOKEN_KINDS, USAGE_KEY, Usage, UsageError, add_to_summary
from app.push import payloads
from app.push.configs import new_row
from app.store import rows
from app.store.leases import Held, Leases
from app.store.outage import OutageLog, backoff, is_unavailable
from app.store.repo import Repository
from app.store.writer import SeqTakenError, Write, Writer
from app.telemetry import traces

from .state import check_transition

if TYPE_CHECKING:
    from datetime import datetime

    from app.protocol.model import Event, Message, PushConfig, Task, TaskStatus

log = logging.getLogger(__name__)

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES
"""A blocking send returns once its task is in one of these."""
WORKER_PREFIX = "worker:"
"""Lease holders with this prefix are remote workers (`a2a-server worker`), not replicas: they write
through the worker endpoints, and requests for their tasks are written by whichever replica takes them."""
LOST_NOTICE_S = 2.0
"""How long a notice to a replica that lost a task waits for its acknowledgement."""


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
    holder: str | None = None
    """Who holds its lease when not this replica: a remote worker (`tasks/workers.py`), for whom this
    replica writes; its commits keep the lease the worker's."""
    traceparent: str | None = None
    """The W3C trace context of the request that created the task (tracing on): its runs continue it."""
    retries: int = 0
    """How often a write that collides is made again on the task re-read: a request's write to a remote
    worker's task, which the worker writes meanwhile through any replica (its own batches never retry)."""
    on_end: Callable[[], None] | None = None
    """Called as the task ends, before the requests waiting for it wake: its run gives back its agent slot
    then, not after its clean-up, so the caller's next send finds the slot free."""
    unborn: Unborn | None = None
    """Its creation, while not yet committed (`LiveTasks.stage`): nobody but its run and the request
    that made it sees the task until then."""

    def snapshot(self) -> Snapshot:
        return Snapshot(self.task.with_history(None), self.seq)


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
    the same (`app/worker.py`)."""

    records: list[EventRecord]
    status: TaskStatus
    transitions: list[StateTransition]
    history_add: list[Message]
    seq: int
    usage: list[tuple[int, Usage]] = field(default_factory=list)
    """The usage reports the status events carry, each with its event's number."""
    metadata: dict[str, Any] | None = None
    """The task's metadata with the reports added to its usage and the session reported; None when no
    event reports either."""

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
    the status events report into the task's metadata, and keep the last session one reports there."""
    state = task.status.state
    status = task.status
    transitions = list(task.transitions)
    history_add = list(messages or ())
    records: list[EventRecord] = []
    usage: list[tuple[int, Usage]] = []
    session: dict[str, str] | None = None
    for ev in events:
        seq += 1
        records.append(EventRecord(seq, ev))
        if isinstance(ev, StatusUpdate):
            check_transition(state, ev.status.state)
            if ev.status.state != state:
                transitions.append(StateTransition(ev.status.state, ev.status.timestamp))
            state = ev.status.state
            status = ev.status
            if status.message is not None:
                history_add.append(status.message)
            if (report := reported_usage(ev)) is not None:
                usage.append((seq, report))
            if (reported := session_of(ev.metadata)) is not None:
                session = reported
    metadata = None
    if usage or session is not None:
        metadata = dict(task.metadata or {})
        for _, report in usage:
            metadata[USAGE_KEY] = add_to_summary(metadata.get(USAGE_KEY), report)
        if session is not None:
            metadata[SESSION_KEY] = session
    return Step(records, status, transitions, history_add, seq, usage, metadata)


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


class HeldElsewhereError(Exception):
    """Another replica holds the task's lease: only it may write the task."""

    def __init__(self, replica_id: str) -> None:
        super().__init__(replica_id)
        self.replica_id = replica_id


class TaskLostError(Exception):
    """The task was ended or taken over by another replica while its run was here: the run must stop."""


class StillbornError(TaskLostError):
    """A staged task's creation failed with its run's first step (a concurrent copy stored first, or the
    database is away): the request that made it answers, the run stops quietly."""


class UnrecordedError(Exception):
    """A run's events could not be committed within the outage grace: the database stayed away."""


class LiveTasks:
    """The tasks held here (by lease), each a `LiveTask`; requests and runs change them through `apply`."""

    def __init__(
        self,
        repo: Repository,
        writer: Writer,
        bus: Bus,
        leases: Leases,
        outage_grace_s: float = 120.0,
        push_ring: Callable[[], None] | None = None,
        role: str | None = None,
        role_name: str = "default",
        exclusive: bool = False,
    ) -> None:
        self.repo = repo
        """With the writer, bus and leases: the task service reads, writes and forwards through these too."""
        self.writer = writer
        self.bus = bus
        self.leases = leases
        self.replica_id = leases.replica_id
        self.role = role
        """The role whose tasks these are, in a deployment of several (None: the only one)."""
        self.role_name = role_name
        """The role's name, also with one role (what usage rows and metrics name)."""
        self.exclusive = exclusive
        """The agent has effects: a new task is the only open one of its context (`TaskRow.exclusive`)."""
        self.outage_grace_s = outage_grace_s
        """How long a run's commit waits for a database that is away before the run gives up."""
        self._push_ring = push_ring
        """Rung after a commit that wrote notifications: the local delivery worker looks at once."""
        self._live: dict[str, LiveTask] = {}
        self._notices: set[asyncio.Task[None]] = set()
        self._runs_outage = OutageLog("task runs")
        self.created_total = 0
        """Tasks created here (read by the metrics at scrape time, like `ended_total`)."""
        self.ended_total: Counter[str] = Counter()
        """Tasks that ended while held here, by final state."""
        self.tokens_total: Counter[tuple[str, str]] = Counter()
        """Tokens of the usage recorded here, by (model, kind: input, output, cache_read, cache_write)."""
        self.cost_total: defaultdict[str, float] = defaultdict(float)
        """USD of the usage recorded here (known costs), by model."""

    @property
    def held(self) -> int:
        """Unfinished tasks held here."""
        return len(self._live)

    def get(self, task_id: str) -> LiveTask | None:
        """The live task, staged ones included (its run's view)."""
        return self._live.get(task_id)

    def shown(self, task_id: str) -> LiveTask | None:
        """The live task as requests may see and write it: not a staged one, which does not exist yet."""
        live = self._live.get(task_id)
        return None if live is None or live.unborn is not None else live

    async def writable(self, owner: str, task_id: str, take_over: bool = False) -> LiveTask:
        """The task for writing: held here already, or its lease taken now.

        Raises HeldElsewhereError when another live replica holds it (with `take_over`, the admin command
        line's last resort, its lease is taken anyway and the replica told: its run stops at its next commit
        or heartbeat; a remote worker's task is written for the worker as always). A finished task comes
        back unregistered (no lease needed) so callers can answer with the right error.
        """
        live = self.shown(task_id)
        if live is None:
            if take_over:
                holder = await self.leases.holder(task_id, owner=owner)
                take_over = holder is None or not holder.startswith(WORKER_PREFIX)
            # Every query names the owner: another principal's task is neither leased nor revealed.
            taken = await self.leases.take_from(task_id, owner=owner, force=take_over)
            took = taken is not False
            if taken:
                self.tell_lost(taken, task_id)
            worker = None
            if not took:
                holder = await self.leases.holder(task_id, owner=owner)
                if holder is not None and holder.startswith(WORKER_PREFIX):
                    worker = holder  # a remote worker runs it: this replica writes for it
                elif holder is not None and holder != self.replica_id:
                    raise HeldElsewhereError(holder)
            stored = await self.repo.get_task(task_id, owner=owner, to_write=True)
            live = self.shown(task_id)
            if live is None:
                if stored is None:
                    raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
                live = LiveTask(
                    stored.task,
                    stored.owner,
                    stored.last_seq,
                    stored.push,
                    holder=worker,
                    traceparent=stored.traceparent,
                    retries=5 if worker else 0,
                )
                if took and not stored.task.status.state.terminal:
                    self._live[task_id] = live
        if live.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return live

    async def create(self, new: NewTask, now: datetime, hold: bool) -> None:
        """The door of a new task's rows (every later change goes through `apply`): the task with its lease
        when `hold` (its run starts here), its first message, the `submitted` event, a webhook given with
        the message and its outbox rows, the retry key and the Idempotency-Key, in one commit; then publish,
        ring the push worker, and hold it as a live task. DuplicateError when a concurrent copy stored the
        retry key or the Idempotency-Key first."""
        write, first, traceparent = self._creation(new, now, hold)
        await self.writer.commit(write)
        await self._born(new.task, write, first)
        if hold:
            self._live[new.task.id] = LiveTask(
                new.task, new.owner, 1, new.push is not None, artifact_rows=0, traceparent=traceparent
            )

    def stage(self, new: NewTask) -> LiveTask:
        """`create` for a task whose run starts here at once, without its commit: the creation commits
        with the run's first step, one transaction for an agent that answers at once (`born` waits for
        it). Until then the task exists only for its run and the caller."""
        write, first, traceparent = self._creation(new, utcnow(), True)
        unborn = Unborn(write, first, asyncio.get_running_loop().create_future())
        live = LiveTask(
            new.task,
            new.owner,
            1,
            new.push is not None,
            artifact_rows=0,
            traceparent=traceparent,
            unborn=unborn,
        )
        self._live[new.task.id] = live
        return live

    async def born(self, live: LiveTask, within_s: float) -> None:
        """Return once the staged task is committed: with its run's first step, or alone when the run
        has taken none within `within_s`. Raises what the commit raised (DuplicateError when a concurrent
        copy stored first); the task is then dropped."""
        unborn = live.unborn
        if unborn is None:
            return
        await asyncio.wait((unborn.born,), timeout=within_s)  # leaves it pending at the timeout
        if not unborn.born.done():
            async with live.lock:
                if not unborn.born.done():
                    await self._commit_unborn(live, unborn.write)
                    await self._born(live.task, unborn.write, unborn.first)
        await unborn.born

    def _creation(
        self, new: NewTask, now: datetime, hold: bool
    ) -> tuple[Write, list[EventRecord], str | None]:
        """A new task's rows, its `submitted` event and the creating request's trace context."""
        task, owner = new.task, new.owner
        first = [EventRecord(1, StatusUpdate(task.id, task.context_id, task.status))]
        holder, expires = (self.replica_id, self.leases.expiry(now)) if hold else (None, None)
        # The creating request's span: the task's runs, on any replica, and its webhook calls continue it.
        traceparent = traces.traceparent()
        write = Write(
            new_task=rows.new_task(
                task,
                owner,
                now,
                holder,
                expires,
                new.retry_key,
                self.role_name,
                traceparent,
                # Its run starts as soon as this commits: a holder that dies after it must not run it again.
                run_started=hold and self.leases.runs_once,
                exclusive=self.exclusive,
            ),
            messages=[rows.message_row(task.id, owner, m, now) for m in task.history],
            events=rows.event_rows(task.id, first, now),
            idempotency_key=new.key_row,
        )
        if new.push is not None:
            write.push_configs.append(new_row(owner, task.id, new.push, now))
            write.notifications = payloads.notifications(task, first, [], now)
        return write, first, traceparent

    async def _born(self, task: Task, write: Write, first: list[EventRecord]) -> None:
        """What follows a new task's commit: its `submitted` event published, the push worker rung."""
        self.created_total += 1
        await self.bus.publish(task.id, task.context_id, first)
        if write.notifications and self._push_ring is not None:
            self._push_ring()

    async def _commit_unborn(self, live: LiveTask, write: Write) -> None:
        """Commit a staged task's creation (`write` carries it, alone or with a step), under its lock; a
        failure drops the task and answers `born` with the error (`unborn` stays, answered: nothing more
        is written to the task)."""
        unborn = live.unborn
        assert unborn is not None
        try:
            await self.writer.commit(write)
        except BaseException as exc:
            self._live.pop(live.task.id, None)
            # A run stopped mid-commit (the server shutting down): the request gets a retryable 503, not a
            # cancellation that is not its own. Its write may still land; a retry then finds the copy.
            cause = DatabaseUnavailableError() if isinstance(exc, asyncio.CancelledError) else exc
            unborn.born.set_exception(cause)
            raise
        live.unborn = None
        unborn.born.set_result(None)

    async def apply(
        self,
        live: LiveTask,
        events: list[Event],
        messages: Iterable[Message] = (),
        admit: Callable[[Task], None] | None = None,
        key_row: dict[str, Any] | None = None,
        wait: bool = False,
    ) -> list[EventRecord]:
        """`_apply`; a request's write for a remote worker's task (`live.retries`) that collides with the
        worker's own events, stored meanwhile through another replica, is made again on the task as it
        now stands (`admit` sees it again)."""
        messages = list(messages)
        for attempt in range(live.retries + 1):
            try:
                return await self._apply(live, events, messages, admit, key_row, wait)
            except SeqTakenError:
                if attempt == live.retries:
                    raise
                stored = await self.repo.get_task(live.task.id, owner=None, to_write=True)
                if stored is None:
                    raise
                live.task, live.seq, live.push, live.artifact_rows = (
                    stored.task,
                    stored.last_seq,
                    stored.push,
                    None,
                )
        raise AssertionError("unreachable")

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
            if live.unborn is not None and live.unborn.born.done():
                raise StillbornError(task.id)
            if admit is not None:
                admit(task)
            state = task.status.state
            if state.terminal:
                return []
            now = utcnow()
            user_messages = list(messages)
            s = step(task, live.seq, events, user_messages)
            write = Write(
                events=rows.event_rows(task.id, s.records, now),
                artifacts=rows.artifact_rows(task.id, s.records),
                messages=[rows.message_row(task.id, live.owner, m, now) for m in s.history_add],
                idempotency_key=key_row,
            )
            if s.usage:
                write.usage = rows.usage_rows(
                    task.id, live.owner, task.context_id, self.role_name, s.usage, now
                )
            if s.metadata is not None:
                write.task_metadata = rows.task_metadata(task.id, s.metadata)
            if live.push:
                write.notifications = payloads.notifications(task, s.records, user_messages, now)
            ended = s.status.state.terminal
            stored = None if live.artifact_rows is None else live.artifact_rows + len(write.artifacts)
            if ended:
                folded = rows.folded_rows(task, events)
                if stored != len(folded):
                    write.folded_artifacts = folded
            write.task_update = rows.task_update(
                task.id,
                s.status,
                s.transitions,
                s.seq,
                now,
                None if ended else live.holder or self.replica_id,
                None if ended else self.leases.expiry(now),
            )
            unborn = live.unborn
            try:
                if unborn is None:
                    await self._commit(live, write, wait)
                else:
                    write = unborn.write.then(write)
                    await self._commit_unborn(live, write)
            except SeqTakenError:
                if live.holder is None:
                    # Our next event number is taken: another replica took this task over.
                    self.lose(task.id)
                    log.warning("task %s was taken over by another replica; dropping it here", task.id)
                raise
            except Exception as exc:
                if unborn is not None:
                    raise StillbornError(task.id) from exc
                raise
            if write.notifications and self._push_ring is not None:
                self._push_ring()
            s.apply_to(task, events)
            live.seq = s.seq
            live.artifact_rows = stored
            self._count_usage(s.usage)
            if ended:
                self._live.pop(task.id, None)
                self.ended_total[s.status.state.value] += 1
                if live.on_end is not None:
                    live.on_end()
            _wake_waiters(live)
        if unborn is not None:
            self.created_total += 1
            await self.bus.publish(task.id, task.context_id, unborn.first + s.records)
        else:
            await self.bus.publish(task.id, task.context_id, s.records)
        return s.records

    def _count_usage(self, reports: list[tuple[int, Usage]]) -> None:
        for _, usage in reports:
            for m in usage.models:
                for kind in TOKEN_KINDS:
                    self.tokens_total[(m.model, kind)] += m.tokens(kind)
                if m.cost_usd is not None:
                    self.cost_total[m.model] += m.cost_usd

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
                except SeqTakenError:
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
        task_id, mark = rows.update_mark(write.task_update)
        try:
            stored = await self.leases.recorded(task_id)
        except Exception as exc:
            if is_unavailable(exc):
                return False
            raise
        return stored == mark

    # ---- the runner's side ---------------------------------------------------------------------

    async def record(self, task_id: str, events: list[Event]) -> bool:
        """Apply events produced by the task's run; True once the task has ended.

        Waits out a database outage up to the grace; raises UnrecordedError past it, and TaskLostError
        when the task is no longer this replica's (ended or taken over elsewhere)."""
        live = self._live.get(task_id)
        if live is None:
            raise TaskLostError(task_id)
        try:
            await self.apply(live, events, wait=True)
        except SeqTakenError:
            raise TaskLostError(task_id) from None
        return live.task.status.state.terminal

    async def fail(self, task_id: str, reason: str, wait: bool = False) -> None:
        """End the task `failed` with `reason` (with `wait`, as its run: waiting out an outage). Raises
        TaskLostError when another replica took it over meanwhile."""
        live = self._live.get(task_id)
        if live is not None:
            event = status_update(task_id, live.task.context_id, TaskState.FAILED, reason)
            try:
                await self.apply(live, [event], wait=wait)
            except SeqTakenError:
                raise TaskLostError(task_id) from None

    def forget(self, task_id: str) -> None:
        """The task's run ended here without ending the task: stop holding it in memory, so reads come
        from the database and its lease, no longer renewed, expires for the reaper to act on."""
        live = self._live.get(task_id)
        if live is not None and not live.task.status.state.terminal:
            self.lose(task_id)

    async def adopt(self, task_id: str) -> bool:
        """Load a task this replica has just claimed so its run can start; False if it is gone."""
        if task_id in self._live:
            return True
        stored = await self.repo.get_task(task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return False
        self._live[task_id] = LiveTask(
            stored.task, stored.owner, stored.last_seq, stored.push, traceparent=stored.traceparent
        )
        return True

    async def end_lost(self, held: Held, reason: str, *, restarted: bool = False) -> bool:
        """Fail a working task whose agent is gone, if this replica can take it; True when it did.

        With `restarted`, the holder is this replica's previous life (its name): gone for sure. Otherwise
        the lease is seized only if its holder left it void (`Leases.seize`), and a holder that commits
        after the seizure wins: its newer event number stops this write."""
        expected: int | None = None
        if restarted:
            if not await self.leases.take(held.task_id):
                return False
        else:
            seized = await self.leases.seize(held)
            if seized is None:
                return False
            expected = seized.last_seq
        stored = await self.repo.get_task(held.task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return False
        if expected is not None and stored.last_seq != expected:
            log.warning(
                "task %s: its holder %s committed as it was reaped; left to it", held.task_id, held.owner
            )
            return False
        live = LiveTask(stored.task, stored.owner, expected or stored.last_seq, stored.push)
        self._live[held.task_id] = live
        event = status_update(held.task_id, stored.task.context_id, TaskState.FAILED, reason)
        try:
            ended = bool(await self.apply(live, [event]))
        except SeqTakenError:
            return False
        if ended and not restarted:
            self.tell_lost(held.owner, held.task_id)
        return ended

    def tell_lost(self, replica_id: str, task_id: str) -> None:
        """Tell the replica whose lease on the task was taken (or whose task was ended) here, so it stops
        the run at once; if the bus cannot reach it, its heartbeat finds out (`Leases.renew`). A remote
        worker finds out from its next sync or commit."""
        if replica_id.startswith(WORKER_PREFIX):
            return

        async def tell() -> None:
            try:
                body = {"op": "lost", "task": task_id, "role": self.role}
                await self.bus.request(replica_id, body, LOST_NOTICE_S)
            except Exception:
                log.info("replica %s did not hear that task %s was taken from it", replica_id, task_id)

        notice = asyncio.create_task(tell(), name=f"lost-{task_id}")
        self._notices.add(notice)
        notice.add_done_callback(self._notices.discard)

    async def notices_sent(self) -> None:
        """Wait for the `lost` notices in flight (each waits at most LOST_NOTICE_S for its answer)."""
        await asyncio.gather(*self._notices, return_exceptions=True)

    async def refuse(self, task_id: str, reason: str) -> bool:
        """Fail a queued task nobody will run (its role has no live instance), if it is still queued and
        this replica can take it; True when it did."""
        if not await self.leases.take(task_id):
            return False
        stored = await self.repo.get_task(task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state is not TaskState.SUBMITTED:
            await self.leases.release([task_id])
            return False
        live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push)
        event = status_update(task_id, stored.task.context_id, TaskState.FAILED, reason)
        try:
            return bool(await self.apply(live, [event]))
        except SeqTakenError:
            return False

    async def webhooked(self, task_ids: list[str]) -> set[str]:
        """Those of these tasks that have a webhook now (the runner's heartbeat: one added elsewhere)."""
        return await self.repo.webhooked(task_ids)

    def resync(self, task_id: str) -> None:
        """Send this process's followers of the task to its log (a taker the bus did not reach wrote it)."""
        self.bus.resync(task_id)

    def lose(self, task_id: str) -> bool:
        """The task was ended or taken over by another replica: stop holding it here, and send the
        blocking requests waiting on it to follow it from the log instead. True if it was held here."""
        live = self._live.pop(task_id, None)
        if live is None:
            return False
        # Whoever wrote it may not reach this process's followers over the bus (an admin's cancel without
        # Redis): they read the log instead.
        self.bus.resync(task_id)
        for fut in live.waiters:
            if not fut.done():
                fut.set_exception(HeldElsewhereError(""))
        live.waiters.clear()
        return True

    async def release(self, task_ids: list[str]) -> None:
        """Stop holding these tasks here: queued ones go back to the queue, waiting ones to anyone."""
        for task_id in task_ids:
            self._live.pop(task_id, None)
        await self.leases.release(task_ids)


def _wake_waiters(live: LiveTask) -> None:
    """Answer the blocking sends waiting for the task to stop (`follow.Reader.wait_stopped`)."""
    if live.waiters and live.task.status.state in STOP_STATES:
        snap = live.snapshot()
        for fut in live.waiters:
            if not fut.done():
                fut.set_result(snap)
        live.waiters.clear()
