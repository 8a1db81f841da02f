"""The server's side of remote workers (`a2a-server worker`, `app/cli/worker.py`): agents of one role running
on another machine, which connects out over HTTP and holds no database or Redis credential.

A worker is a lease holder named `worker:<principal>:<instance>`. It claims its role's queued tasks
(`claim`, a long poll on the queue's doorbell), numbers its run's events itself and hands them over in order
(`record`: idempotent by event number, so a batch retried after a lost answer, through any replica, is
stored once), and renews its leases while it learns what others did to its tasks (`sync`, a long poll on
the tasks' channels): an answer to a waiting task, a cancel, a lease taken. Whichever replica serves a call
writes for it through `LiveTasks.apply`, the one way tasks change. A worker that stops syncing is reaped as
a dead replica is, the reason naming the worker. Its runs' checkpoints are kept in the role's store
(`checkpoints`, reached only while it holds the running task), and a worker drained at shutdown hands its
task on from there (`hand_on`, as a replica's drain does).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.bus.base import Subscription
from app.protocol.events import EventRecord, StatusUpdate, event_kind
from app.protocol.model import Role, Task, TaskState, utcnow
from app.store.instances import InstanceRecord, Instances, instance_name
from app.store.leases import Leases
from app.store.writer import SeqTakenError

from .held import LiveTask, TaskLostError
from .live import LiveTasks
from .resume import hand_on
from .step import WORKER_PREFIX
from .worker_wire import Claimed, events_from_wire, known_from_wire

if TYPE_CHECKING:
    from app.store.run_checkpoints import RunCheckpoints

MAX_WAIT_S = 30.0
Contexts = Callable[[Sequence[tuple[str, str]]], Awaitable[Mapping[tuple[str, str], tuple[int, str]]]]
"""(owner, context id) pairs → for those with tasks left, how many have not ended and the last status time."""
"""The longest a worker's long poll is held (below proxies' usual read timeouts)."""


class WorkerLostError(Exception):
    """The task is no longer this worker's: ended, canceled, or its lease taken."""


def holder_of(principal: str, instance: str) -> str:
    """The lease holder name of a worker instance (the principal its credential names, and its instance)."""
    return f"{WORKER_PREFIX}{principal}:{instance}"


async def _status_change(subs: list[Subscription], wait_s: float) -> bool:
    """Whether a status event (an answer, a cancel, an end) arrived on one of the subscriptions within
    `wait_s`; artifact chunks are drained and ignored."""
    gets = [asyncio.ensure_future(s.get()) for s in subs]
    try:
        done, _ = await asyncio.wait(gets, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for g in gets:
            g.cancel()
    for g in done:
        record = g.result()
        if not isinstance(record, EventRecord) or isinstance(record.event, StatusUpdate):
            return True  # a status, or a resync: look again
    return False


class Announcer:
    """Lists remote workers in discovery: the replica a worker calls refreshes the worker's instance (at
    most once a heartbeat per worker here), as the worker cannot reach the database itself."""

    def __init__(self, instances: Instances, template: InstanceRecord, heartbeat_s: float) -> None:
        self._instances = instances
        self._template = template
        self.every_s = heartbeat_s
        self._last: dict[str, float] = {}
        self._started: dict[str, datetime] = {}

    async def seen(self, holder: str, slots: int | None, running: int | None) -> None:
        if slots is None:
            return
        now = time.monotonic()
        if now - self._last.get(holder, -math.inf) < self.every_s / 2:
            return
        self._last[holder] = now
        started = self._started.setdefault(holder, utcnow())
        record = self._template.announced(
            holder.removeprefix(WORKER_PREFIX), "worker", slots, running or 0, started
        )
        try:
            await self._instances.upsert([record], revive=False)
        except Exception:
            self._last.pop(holder, None)  # try again on its next call
            raise

    async def hello(self, holder: str) -> None:
        """A life of the worker begins (its first call): its previous life's goodbye mark is cleared."""
        self._last.pop(holder, None)
        self._started.pop(holder, None)
        await self._instances.revive(self._name(holder))

    async def gone(self, holder: str) -> None:
        """The worker said it is leaving: out of the listing at once, and kept out by the calls it sent
        before that are handled after (by any replica) until its next life's `hello`."""
        self._last.pop(holder, None)
        self._started.pop(holder, None)
        await self._instances.leave([self._name(holder)])

    def _name(self, holder: str) -> str:
        return instance_name(self._template.role, holder.removeprefix(WORKER_PREFIX))


class WorkerDesk:
    """What the workers of one role ask of this replica."""

    def __init__(
        self,
        tasks: LiveTasks,
        announce: Announcer | None = None,
        contexts: Contexts | None = None,
        ended: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        """It reads, writes and leases through the role's parts (`tasks.parts`), its leases in each worker's
        name (`Leases.for_holder`); `contexts` answers a worker's workspace sweep (the wiring's, over the
        store, of the role's tasks only); `ended(owner, task_id)` cancels the children a worker's task left
        running when its events end it (the worker's own calls end with its hold of the task)."""
        self.announce = announce
        self.checkpoints: RunCheckpoints | None = tasks.parts.checkpoints
        """Where a worker's runs' checkpoints are kept, as their tasks' owners', while it holds their tasks
        (`running`); None: none is."""
        self.contexts = contexts
        self._ended = ended
        self._tasks = tasks
        self._repo = tasks.parts.repo
        self._bus = tasks.parts.bus
        self._role_leases = tasks.parts.leases
        self._doorbell = asyncio.Event()
        self._bus.on_queued(self._ring)

    def _ring(self) -> None:
        self._doorbell.set()
        self._doorbell = asyncio.Event()

    def _leases(self, holder: str) -> Leases:
        return self._role_leases.for_holder(holder)

    async def claim(self, holder: str, limit: int, wait_s: float) -> list[Claimed]:
        """Up to `limit` of the role's queued tasks, leased to the worker; waits up to `wait_s` for one."""
        leases = self._leases(holder)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait_s, MAX_WAIT_S)
        while True:
            doorbell = self._doorbell
            claimed = []
            for task_id in await leases.claim_queued(limit):
                stored = await self._repo.get_task(task_id, owner=None, to_write=True)
                if stored is None or stored.task.status.state.terminal:
                    await leases.release([task_id])
                    continue
                claimed.append(Claimed(stored.task, stored.owner, stored.last_seq, stored.traceparent))
            left = deadline - loop.time()
            if claimed or left <= 0:
                return claimed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 2.0)):  # the doorbell, or a look now and then
                    await doorbell.wait()

    async def record(self, holder: str, task_id: str, after: int, events: list[dict[str, Any]]) -> int:
        """Store the worker's events numbered from `after + 1`; the task's last event number after it.

        A batch (or its first part) already stored, as the same events, is acknowledged, not stored again;
        events that are not the worker's at those numbers, or a task no longer the worker's, are
        WorkerLostError."""
        stored = await self._repo.get_task(task_id, owner=None, to_write=True)
        if stored is None:
            raise WorkerLostError(task_id)
        decoded = events_from_wire(stored.task, events)
        done = stored.last_seq - after
        if done < 0:
            raise WorkerLostError(task_id)
        if done > 0:
            have = await self._repo.events_after(task_id, stored.task.context_id, after, owner=stored.owner)
            theirs = [(event_kind(r.event), r.event.to_store()) for r in have[: len(decoded)]]
            mine = [(event_kind(e), e.to_store()) for e in decoded[: len(theirs)]]
            if theirs != mine:
                raise WorkerLostError(task_id)
            if done >= len(decoded):
                return after + len(decoded)
        recorded = await self._leases(holder).recorded(task_id)
        if recorded is None or recorded[1] != holder or stored.task.status.state.terminal:
            raise WorkerLostError(task_id)
        live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push, holder=holder)
        try:
            await self._tasks.apply(live, decoded[done:])
        except (SeqTakenError, TaskLostError):
            raise WorkerLostError(task_id) from None
        if self._ended is not None and live.task.status.state.terminal:
            await self._ended(stored.owner, task_id)
        return live.seq

    async def sync(self, holder: str, held: Mapping[str, Any], wait_s: float) -> dict[str, dict[str, Any]]:
        """Renew the worker's leases on `held` (task id → `{"seq": its last event number, "user": the id of
        the last user message it has}`) and say what others did to them: `{"lost": true}`, or the newer
        `lastSeq` and `state` with the user's answer (`message`). With nothing to say, waits up to `wait_s`
        for a status change on one of them (the worker's own chunks do not wake it)."""
        known = {t: known_from_wire(v) for t, v in held.items()}
        leases = self._leases(holder)
        subs: list[Subscription] = []
        try:
            if wait_s > 0 and known:
                subs = [await self._bus.subscribe(t) for t in known]
            renewed = await leases.renew(list(known))
            news = await self._news(leases, known, renewed)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + min(wait_s, MAX_WAIT_S)
            while not news and subs and (left := deadline - loop.time()) > 0:
                if await _status_change(subs, left):
                    news = await self._news(leases, known, renewed)
            if subs:
                news = news or await self._news(leases, known, await leases.renew(list(known)))
            return news
        finally:
            for s in subs:
                await self._bus.unsubscribe(s)

    async def _news(
        self, leases: Leases, known: Mapping[str, tuple[int, str | None]], renewed: set[str]
    ) -> dict[str, dict[str, Any]]:
        news: dict[str, dict[str, Any]] = {}
        for task_id, (seq, user) in known.items():
            if task_id not in renewed:
                news[task_id] = {"lost": True}
                continue
            recorded = await leases.recorded(task_id)
            if recorded is None or recorded[0] <= seq:
                continue
            stored = await self._repo.get_task(task_id, owner=None, history=1)
            if stored is None:
                news[task_id] = {"lost": True}
                continue
            last = stored.task.history[-1] if stored.task.history else None
            if last is not None and last.role is Role.USER and last.message_id != user:
                news[task_id] = {
                    "lastSeq": stored.last_seq,
                    "state": stored.task.status.state.value,
                    "message": last.to_store(),
                }
        return news

    async def recorded(self, holder: str, task_id: str) -> tuple[int, str | None] | None:
        return await self._leases(holder).recorded(task_id)

    async def running(self, holder: str, task_id: str) -> tuple[str, Task] | None:
        """The task's owner and the task (no history), while the worker holds its lease and it has not
        ended: a run's calls to other agents are the worker's only this long (None: not, or no more)."""
        recorded = await self._leases(holder).recorded(task_id)
        if recorded is None or recorded[1] != holder:
            return None
        stored = await self._repo.get_task(task_id, owner=None, history=0)
        if stored is None or stored.task.status.state.terminal:
            return None
        return stored.owner, stored.task

    async def release(self, holder: str, task_ids: list[str]) -> None:
        await self._leases(holder).release(task_ids)

    async def hand_on(self, holder: str, task_id: str, why: str) -> str | None:
        """The worker shut down cleanly and its run of `task_id` saved a checkpoint: put the task back in the
        queue to go on elsewhere (`resume.hand_on`, as a replica's drain does). None when it did, else why
        not; WorkerLostError when the worker no longer holds the working task."""
        stored = await self._repo.get_task(task_id, owner=None, to_write=True)
        recorded = await self._leases(holder).recorded(task_id)
        if (
            stored is None
            or recorded is None
            or recorded[1] != holder
            or stored.task.status.state is not TaskState.WORKING
        ):
            raise WorkerLostError(task_id)
        live = LiveTask(stored.task, stored.owner, stored.last_seq, stored.push, holder=holder)
        try:
            return await hand_on(self._tasks, live, why, holder)
        except (SeqTakenError, TaskLostError):
            raise WorkerLostError(task_id) from None

    @property
    def ttl_s(self) -> float:
        return self._role_leases.ttl_s
