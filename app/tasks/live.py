"""The tasks this process writes (`LiveTasks`: the tasks held here by lease), and the one way to change them.

Every change of a task goes through `LiveTasks.apply` on the task's `LiveTask`: it checks the state machine,
numbers the events and builds their rows (`step.py`: the status, history and artifact rows they imply, and
the usage a status event reports: its `task_usage` rows and the task's summed `metadata.usage`), commits
them through the group-commit writer (`commits.py`), updates the in-memory snapshot, wakes the requests
waiting for it to stop, and only then rings the bus. One process writes a task at a time, so the in-memory
sequence number is the truth between commits. A new task's rows come in through `create` (or `stage`).

It imports the stores, the bus and the pieces of a task below it (`step.py`, `held.py`, `commits.py`,
`notices.py`); the task service and its parts, `losses.py`, `runner/idle.py` and the wiring import it. The
runner needs only `held.py` and `step.py`: a remote worker's runner has no live tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from app.protocol.errors import DatabaseUnavailableError, TaskNotFoundError
from app.protocol.events import EventRecord, status_update
from app.protocol.model import TaskState, utcnow
from app.protocol.usage import TOKEN_KINDS, Usage
from app.store.write import Write
from app.store.writer import SeqTakenError
from app.telemetry import traces

from .commits import Commits
from .held import HeldElsewhereError, LiveTask, StillbornError, TaskLostError
from .notices import LostNotices
from .parts import RoleParts
from .resume import hand_on
from .step import (
    STOP_STATES,
    WORKER_PREFIX,
    NewTask,
    Step,
    Unborn,
    artifact_rows_after,
    creation_write,
    step,
    step_write,
)

if TYPE_CHECKING:
    from datetime import datetime

    from app.protocol.events import Event
    from app.protocol.model import Message, Task

log = logging.getLogger(__name__)


class LiveTasks:
    """The tasks held here (by lease), each a `LiveTask`; requests and runs change them through `apply`."""

    def __init__(
        self,
        parts: RoleParts,
        outage_grace_s: float = 120.0,
        push_ring: Callable[[], None] | None = None,
        exclusive: bool = False,
    ) -> None:
        self.parts = parts
        """The role's repository, writer, bus and leases: the task service, control, the worker desk and the
        losses read, write and forward through these too."""
        self.exclusive = exclusive
        """The agent has effects: a new task is the only open one of its context (`TaskRow.exclusive`)."""
        self.outage_grace_s = outage_grace_s
        """How long a run's commit waits for a database that is away before the run gives up."""
        self._commits = Commits(parts.writer, parts.leases, outage_grace_s)
        self.notices = LostNotices(parts.bus, parts.role)
        """Tells a replica whose lease on a task was taken here (`writable`, `losses.Losses.end_lost`)."""
        self._push_ring = push_ring
        """Rung after a commit that wrote notifications: the local delivery worker looks at once."""
        self._live: dict[str, LiveTask] = {}
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
                holder = await self.parts.leases.holder(task_id, owner=owner)
                take_over = holder is None or not holder.startswith(WORKER_PREFIX)
            # Every query names the owner: another principal's task is neither leased nor revealed.
            taken = await self.parts.leases.take_from(task_id, owner=owner, force=take_over)
            took = taken is not False
            if taken:
                self.notices.tell(taken, task_id)
            worker = None
            if not took:
                holder = await self.parts.leases.holder(task_id, owner=owner)
                if holder is not None and holder.startswith(WORKER_PREFIX):
                    worker = holder  # a remote worker runs it: this replica writes for it
                elif holder is not None and holder != self.parts.replica_id:
                    raise HeldElsewhereError(holder)
            stored = await self.parts.repo.get_task(task_id, owner=owner, to_write=True)
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
        await self.parts.writer.commit(write)
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
        lease = (self.parts.replica_id, self.parts.leases.expiry(now)) if hold else None
        # The creating request's span: the task's runs, on any replica, and its webhook calls continue it.
        traceparent = traces.traceparent()
        write, first = creation_write(
            new,
            now,
            self.parts.role_name,
            lease,
            traceparent,
            # Its run starts as soon as this commits: a holder that dies after it must not run it again.
            run_started=hold and self.parts.leases.runs_once,
            exclusive=self.exclusive,
        )
        return write, first, traceparent

    async def _born(self, task: Task, write: Write, first: list[EventRecord]) -> None:
        """What follows a new task's commit: its `submitted` event published, the push worker rung."""
        self.created_total += 1
        await self.parts.bus.publish(task.id, task.context_id, first)
        if write.notifications and self._push_ring is not None:
            self._push_ring()

    async def _commit_unborn(self, live: LiveTask, write: Write) -> None:
        """Commit a staged task's creation (`write` carries it, alone or with a step), under its lock; a
        failure drops the task and answers `born` with the error (`unborn` stays, answered: nothing more
        is written to the task)."""
        unborn = live.unborn
        assert unborn is not None
        try:
            await self.parts.writer.commit(write)
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
        """Commit `events` (and user `messages`, and an Idempotency-Key naming the task) to the task, then
        publish them. `admit` sees the task under its lock first and may refuse by raising.

        Events for a task that has already ended are dropped: nothing leaves a terminal state. With
        `wait` (the task's own run) a database that is away is waited for (`Commits.commit`); a request
        instead fails at once, also when the run is waiting out an outage on this task. A write that
        collides may be made again on the task re-read (`_redo`): `admit` then sees it again.
        """
        messages = list(messages)
        for attempt in range(live.retries + 2):
            if live.stalled and not wait:
                raise DatabaseUnavailableError()
            async with live.lock:
                task = live.task
                if live.unborn is not None and live.unborn.born.done():
                    raise StillbornError(task.id)
                if admit is not None:
                    admit(task)
                if task.status.state.terminal:
                    return []
                now = utcnow()
                s = step(task, live.seq, events, messages)
                write = step_write(
                    task,
                    s,
                    events,
                    messages,
                    now,
                    owner=live.owner,
                    role=self.parts.role_name,
                    push=live.push,
                    artifact_rows=live.artifact_rows,
                    lease=(live.holder or self.parts.replica_id, self.parts.leases.expiry(now)),
                    key_row=key_row,
                )
                try:
                    created = await self._store(live, write, wait)
                except SeqTakenError:
                    if not await self._redo(live, attempt):
                        raise
                    continue
                self._applied(live, s, events, write)
            await self.parts.bus.publish(task.id, task.context_id, created + s.records)
            return s.records
        raise AssertionError("unreachable")

    async def _store(self, live: LiveTask, write: Write, wait: bool) -> list[EventRecord]:
        """Commit a step's `write` (with the task's staged creation, if it has one), then ring the push
        worker for its notifications. Returns what to publish before the step's events: the creation's
        `submitted` event when it committed with the step."""
        unborn = live.unborn
        try:
            if unborn is None:
                await self._commits.commit(live, write, wait)
            else:
                write = unborn.write.then(write)
                await self._commit_unborn(live, write)
        except SeqTakenError:
            raise  # a taken number is `apply`'s to judge (`_redo`), also for a staged task
        except Exception as exc:
            if unborn is not None:
                raise StillbornError(live.task.id) from exc
            raise
        if write.notifications and self._push_ring is not None:
            self._push_ring()
        if unborn is None:
            return []
        self.created_total += 1
        return unborn.first

    def _applied(self, live: LiveTask, s: Step, events: list[Event], write: Write) -> None:
        """Bring the live task up to its committed step `s` (of `events`, stored by `write`) and count its
        usage; one that ended is no longer held, its slot is given back, then its waiters wake."""
        s.apply_to(live.task, events)
        live.seq = s.seq
        live.artifact_rows = artifact_rows_after(live.artifact_rows, write)
        self._count_usage(s.usage)
        if s.status.state.terminal:
            self._live.pop(live.task.id, None)
            self.ended_total[s.status.state.value] += 1
            if live.on_end is not None:
                live.on_end()
        _wake_waiters(live)

    async def _redo(self, live: LiveTask, attempt: int) -> bool:
        """Whether a step whose event numbers were taken is made again on the task re-read (`_reread`): a
        remote worker's task (`live.retries`: the worker's own events, stored meanwhile through another
        replica), or once a task held here whose own last step landed unseen (`Commits.landed_unseen`).
        Otherwise another replica took the task over: it is dropped here."""
        if live.holder is not None:
            return attempt < live.retries and await self._reread(live)
        if attempt == 0 and live.unborn is None and await self._commits.landed_unseen(live):
            return await self._reread(live)
        self.lose(live.task.id)
        log.warning("task %s was taken over by another replica; dropping it here", live.task.id)
        return False

    async def _reread(self, live: LiveTask) -> bool:
        """Bring `live` up to the task as stored, for a write made again (`_redo`); False if it is gone."""
        stored = await self.parts.repo.get_task(live.task.id, owner=None, to_write=True)
        if stored is None:
            return False
        live.task, live.seq, live.push, live.artifact_rows = stored.task, stored.last_seq, stored.push, None
        return True

    def _count_usage(self, reports: list[tuple[int, Usage]]) -> None:
        for _, usage in reports:
            for m in usage.models:
                for kind in TOKEN_KINDS:
                    self.tokens_total[(m.model, kind)] += m.tokens(kind)
                if m.cost_usd is not None:
                    self.cost_total[m.model] += m.cost_usd

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
        stored = await self.parts.repo.get_task(task_id, owner=None, to_write=True)
        if stored is None or stored.task.status.state.terminal:
            return False
        self._live[task_id] = LiveTask(
            stored.task, stored.owner, stored.last_seq, stored.push, traceparent=stored.traceparent
        )
        return True

    async def webhooked(self, task_ids: list[str]) -> set[str]:
        """Those of these tasks that have a webhook now (the runner's heartbeat: one added elsewhere)."""
        return await self.parts.repo.webhooked(task_ids)

    def resync(self, task_id: str) -> None:
        """Send this process's followers of the task to its log (a taker the bus did not reach wrote it)."""
        self.parts.bus.resync(task_id)

    def hold(self, live: LiveTask) -> None:
        """Hold a task loaded to be ended here (`losses.Losses.end_lost`): requests find it and wait."""
        self._live[live.task.id] = live

    def lose(self, task_id: str) -> bool:
        """The task was ended or taken over by another replica: stop holding it here, and send the
        blocking requests waiting on it to follow it from the log instead. True if it was held here."""
        live = self._live.pop(task_id, None)
        if live is None:
            return False
        # Whoever wrote it may not reach this process's followers over the bus (an admin's cancel without
        # Redis): they read the log instead.
        self.parts.bus.resync(task_id)
        for fut in live.waiters:
            if not fut.done():
                fut.set_exception(HeldElsewhereError(""))
        live.waiters.clear()
        return True

    async def hand_on(self, task_id: str, why: str) -> str | None:
        """Put a working task held here back in the queue to go on from its checkpoint (`resume.hand_on`):
        its run here has stopped (a drain). None when it did, else why not."""
        live = self._live.get(task_id)
        if live is None:
            return " It was no longer held here."
        return await hand_on(self, live, why, live.holder or self.parts.replica_id)

    async def release(self, task_ids: list[str]) -> None:
        """Stop holding these tasks here: queued ones go back to the queue, waiting ones to anyone."""
        for task_id in task_ids:
            self._live.pop(task_id, None)
        await self.parts.leases.release(task_ids)


def _wake_waiters(live: LiveTask) -> None:
    """Answer the blocking sends waiting for the task to stop (`follow.Reader.wait_stopped`)."""
    if live.waiters and live.task.status.state in STOP_STATES:
        snap = live.snapshot()
        for fut in live.waiters:
            if not fut.done():
                fut.set_result(snap)
        live.waiters.clear()
