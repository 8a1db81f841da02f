"""Reading a task as its owner may see it: its snapshot, its head, and following its event log.

A follower subscribes first, then reads the snapshot, then drops what the snapshot already holds; a gap in
the sequence (lag, a lost doorbell, a resync) is filled from the log. Reads wait out a database outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import TypeVar

from app.bus.base import RESYNC, Subscription
from app.protocol.errors import TaskNotFoundError
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import TERMINAL_STATES, Task, TaskState
from app.store.outage import OutageLog, backoff, is_unavailable
from app.store.repo import TaskHead

from .held import HeldElsewhereError, LiveTask
from .live import LiveTasks
from .step import STOP_STATES, Snapshot

_T = TypeVar("_T")
REPLAY_PAGE = 500
"""Events a stream reads from the log at once when it catches up (a resync, a gap, a resume)."""
DEAF_POLL_S = 5.0
"""How often a stream reads the log of a task not held here when the bus hears only this process: who
writes it (the admin command line canceling a queued task) rings no bell here."""


class Reader:
    """Snapshots and event streams of tasks, from the live task when it is held here, else the store."""

    def __init__(self, tasks: LiveTasks, max_history: int | None = None) -> None:
        self._tasks = tasks
        self._repo = tasks.parts.repo
        self._bus = tasks.parts.bus
        self.max_history = max_history
        """Most history messages any read returns (None: all)."""
        self._outage = OutageLog("stream readers")

    def limit(self, history_length: int | None = None) -> int | None:
        """How many history messages a read returns: the caller's historyLength within the server's cap."""
        if history_length is None:
            return self.max_history
        history_length = max(history_length, 0)
        return history_length if self.max_history is None else min(history_length, self.max_history)

    def clip(self, task: Task, history_length: int | None = None) -> Task:
        limit = self.limit(history_length)
        return task if limit is None else task.with_history(limit)

    async def load(self, owner: str, task_id: str, history_length: int | None = None) -> Snapshot:
        """The task as its owner may see it; someone else's task does not exist for them."""
        live = self._tasks.shown(task_id)
        if live is not None:
            if live.owner != owner:
                raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
            snap = live.snapshot()
            return Snapshot(self.clip(snap.task, history_length), snap.seq)
        stored = await self._repo.get_task(task_id, owner=owner, history=self.limit(history_length))
        if stored is None or stored.owner != owner:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return Snapshot(stored.task, stored.last_seq)

    async def head(self, owner: str, task_id: str) -> TaskHead:
        """The task's context, state and last event number: its row only, never its history or artifacts."""
        live = self._tasks.shown(task_id)
        if live is not None and live.owner == owner:
            return TaskHead(live.task.context_id, live.task.status.state, live.seq)
        head = await self._repo.task_head(task_id, owner=owner)
        if head is None:
            raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})
        return head

    async def wait_stopped(
        self, owner: str, task_id: str, timeout_s: float, live: LiveTask | None = None
    ) -> Task:
        """The task once it is terminal or waiting for input (or as it stands at the timeout): a future
        the live task answers (`live._wake_waiters`), or following it when it runs elsewhere. `live`: the
        task as the caller staged it, which may have ended (and left the live tasks) since."""
        live = live or self._tasks.shown(task_id)
        if live is not None and live.owner == owner:
            if live.task.status.state in STOP_STATES:
                return live.snapshot().task
            fut: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
            live.waiters.append(fut)
            deadline = asyncio.get_running_loop().time() + timeout_s
            try:
                return (await asyncio.wait_for(fut, timeout_s)).task
            except TimeoutError:
                return (await self.load(owner, task_id)).task
            except HeldElsewhereError:
                # Ended or taken over by another replica meanwhile (`LiveTasks.lose`): follow the log.
                timeout_s = max(deadline - asyncio.get_running_loop().time(), 0.0)
        try:
            async with asyncio.timeout(timeout_s):
                async for item in self.follow(owner, task_id, stop_at=STOP_STATES):
                    if isinstance(item, EventRecord):
                        continue
                    if item.task.status.state in STOP_STATES:
                        return item.task
        except TimeoutError:
            pass
        return (await self.load(owner, task_id)).task

    async def follow(
        self,
        owner: str,
        task_id: str,
        after: int | None = None,
        stop_at: frozenset[TaskState] = TERMINAL_STATES,
    ) -> AsyncIterator[Snapshot | EventRecord]:
        """The task's snapshot, then every later event once and in order, until a stop state.

        With `after`, the snapshot is skipped and the events after that sequence number are replayed from
        the log instead (only the task's row and those events are read). The status event the stream ends
        at is `final` (v0.3: the end of the stream for this interaction), also when it is an interrupted
        state in `stop_at`, which the stored event is not.
        """
        sub = await self._bus.subscribe(task_id)
        try:
            if after is None:
                snap = await self._reading(lambda: self.load(owner, task_id))
                context_id = snap.task.context_id
                yield snap
                expected = snap.seq + 1
                if snap.task.status.state in stop_at:
                    return
            else:
                head = await self._reading(lambda: self.head(owner, task_id))
                context_id = head.context_id
                expected = after + 1
                async with aclosing(self._replay(owner, task_id, context_id, after)) as log:
                    async for rec in log:
                        expected = rec.seq + 1
                        if _stops(rec, stop_at):
                            yield _final(rec)
                            return
                        yield rec
                if head.state in stop_at and expected > head.last_seq:
                    return
            async for rec in self._tail(sub, owner, task_id, context_id, expected):
                if _stops(rec, stop_at):
                    yield _final(rec)
                    return
                yield rec
        finally:
            await self._bus.unsubscribe(sub)

    async def _tail(
        self, sub: Subscription, owner: str, task_id: str, context_id: str, expected: int
    ) -> AsyncIterator[EventRecord]:
        """Live events from `expected` on: duplicates dropped, gaps and resyncs filled from the log."""
        while True:
            rec = await self._next(sub, task_id)
            if rec is RESYNC:
                async with aclosing(self._replay(owner, task_id, context_id, expected - 1)) as log:
                    async for m in log:
                        yield m
                        expected = m.seq + 1
                continue
            if rec.seq < expected:
                continue
            if rec.seq > expected:
                async with aclosing(self._replay(owner, task_id, context_id, expected - 1)) as log:
                    async for m in log:
                        if m.seq >= rec.seq:
                            break
                        yield m
            yield rec
            expected = rec.seq + 1

    async def _next(self, sub: Subscription, task_id: str) -> EventRecord | None:
        """The subscription's next record; RESYNC every DEAF_POLL_S on a bus that does not hear the task's
        writer (in process, and the task not held here)."""
        if self._bus.hears_others or self._tasks.shown(task_id) is not None:
            return await sub.get()
        try:
            async with asyncio.timeout(DEAF_POLL_S):
                return await sub.get()
        except TimeoutError:
            return RESYNC

    async def _replay(
        self, owner: str, task_id: str, context_id: str, after: int
    ) -> AsyncIterator[EventRecord]:
        """The log after `after`, read a page at a time as the reader takes it, waiting while the database
        is out of reach: a reader far behind its task holds one page in memory, not its whole lag."""
        while True:
            page = await self._reading(
                lambda after=after: self._repo.events_after(
                    task_id, context_id, after, owner=owner, limit=REPLAY_PAGE
                )
            )
            for rec in page:
                yield rec
            if len(page) < REPLAY_PAGE:
                return
            after = page[-1].seq

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
                self._outage.failed(exc)
                await asyncio.sleep(delay)
                delay = backoff(delay, cap=2.0)
                continue
            self._outage.ok()
            return result


def _stops(rec: EventRecord, stop_at: frozenset[TaskState]) -> bool:
    return isinstance(rec.event, StatusUpdate) and rec.event.status.state in stop_at


def _final(rec: EventRecord) -> EventRecord:
    """The record a stream ends at, marked `final` (a copy: the stored and published event is shared)."""
    event = rec.event
    if not isinstance(event, StatusUpdate) or event.final:
        return rec
    return EventRecord(rec.seq, replace(event, final=True))
