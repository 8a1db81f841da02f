"""The bus interface: a doorbell that rings each task's subscribers after an event is committed, and
the channel replicas use to ask each other things (cancel this, deliver that answer, wake up: work queued).

The database is the truth. A subscription may miss or lag (a full queue, a lost message, Redis restarted);
it then yields a resync marker and the reader fills the gap from the event log by sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from app.protocol.events import EventRecord
from app.protocol.model import new_id

log = logging.getLogger(__name__)

RESYNC = None
"""What `Subscription.get` returns when the reader must re-read the log: events may have been missed."""

ControlHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def publish_attributes(task_id: str, records: list[EventRecord]) -> dict[str, object]:
    """What a publish's span says: the task and the event numbers rung."""
    if not records:
        return {"a2a.task_id": task_id}
    return {"a2a.task_id": task_id, "a2a.seq.first": records[0].seq, "a2a.seq.last": records[-1].seq}


class Subscription:
    """Events of one task in publication order, bounded; overflow turns into a resync, never a block.

    A deque and the one reader's future rather than an `asyncio.Queue`: a subscription lives as long as
    its stream, and an open stream's memory is mostly such small parts. The deque (its first block is
    0.7 KiB) comes with the first record: most held streams wait on a quiet task."""

    __slots__ = ("_items", "_maxsize", "_waiter", "task_id")

    def __init__(self, task_id: str, maxsize: int = 1024) -> None:
        self.task_id = task_id
        self._items: deque[EventRecord | None] | None = None
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None

    def push(self, record: EventRecord) -> None:
        items = self._items
        if items is None:
            items = self._items = deque()
        elif len(items) >= self._maxsize:
            self.resync()
            return
        items.append(record)
        self._wake()

    def resync(self) -> None:
        """Drop what is queued and tell the reader to read the log instead."""
        self._items = deque((RESYNC,))
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> EventRecord | None:
        """The next record, or RESYNC (None)."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()  # type: ignore[union-attr]  # not empty, so not None


class Bus(ABC):
    """Per-task event fan-out plus replica-to-replica control. Subclasses move the bytes."""

    hears_others = False
    """Whether writes of other processes ring here (Redis); an in-process bus hears only its own."""

    def __init__(self, replica_id: str) -> None:
        self.replica_id = replica_id
        self._subs: dict[str, set[Subscription]] = {}
        self._control: dict[str | None, ControlHandler] = {}
        self._queued: list[Callable[[], None]] = []
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handling: set[asyncio.Task[None]] = set()

    # ---- task events ---------------------------------------------------------------------------

    async def subscribe(self, task_id: str) -> Subscription:
        """Receive the task's events published from now on (returns once that is guaranteed)."""
        sub = Subscription(task_id)
        first = task_id not in self._subs
        self._subs.setdefault(task_id, set()).add(sub)
        if first:
            await self._listen(task_id)
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.task_id)
        if subs is None:
            return
        subs.discard(sub)
        if not subs:
            del self._subs[sub.task_id]
            await self._unlisten(sub.task_id)

    @abstractmethod
    async def publish(self, task_id: str, context_id: str, records: list[EventRecord]) -> None:
        """Ring the task's subscribers everywhere; call only after the records are committed."""

    def _deliver(self, task_id: str, records: list[EventRecord]) -> None:
        for sub in self._subs.get(task_id, ()):
            for record in records:
                sub.push(record)

    def resync(self, task_id: str) -> None:
        """Tell this process's followers of the task to read its log: it may hold events nobody rang for
        (the task was written by a process this bus does not reach)."""
        for sub in self._subs.get(task_id, ()):
            sub.resync()

    def _resync_all(self) -> None:
        for subs in self._subs.values():
            for sub in subs:
                sub.resync()

    async def _listen(self, task_id: str) -> None:  # noqa: B027 - hook for remote buses
        """Start receiving a task's events from other replicas."""

    async def _unlisten(self, task_id: str) -> None:  # noqa: B027 - hook for remote buses
        """Stop receiving a task's events from other replicas."""

    # ---- control -------------------------------------------------------------------------------

    def on_control(self, handler: ControlHandler, role: str | None = None) -> None:
        """Handle requests other replicas send to this one about `role`'s tasks (the body's `role`); the
        handler's dict is the reply. The first handler also takes requests that name no role."""
        self._control[role] = handler
        self._control.setdefault(None, handler)

    def on_queued(self, callback: Callable[[], None]) -> None:
        """Called when any replica rings the queue doorbell (work is waiting to be claimed)."""
        self._queued.append(callback)

    async def request(self, replica_id: str, body: dict[str, Any], wait_s: float) -> dict[str, Any]:
        """Ask another replica; its handler's reply, or TimeoutError."""
        rid = new_id()
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[rid] = fut
        try:
            await self._send(
                replica_id, {"kind": "request", "id": rid, "from": self.replica_id, "body": body}
            )
            return await asyncio.wait_for(fut, wait_s)
        finally:
            self._replies.pop(rid, None)

    async def _on_control_message(self, msg: dict[str, Any]) -> None:
        if msg.get("kind") == "reply":
            fut = self._replies.get(msg.get("id", ""))
            if fut is not None and not fut.done():
                fut.set_result(msg.get("body") or {})
        elif msg.get("kind") == "request" and self._control:
            task = asyncio.create_task(self._answer(msg))
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)

    async def _answer(self, msg: dict[str, Any]) -> None:
        request = msg.get("body") or {}
        handler = self._control.get(request.get("role")) or self._control[None]
        try:
            body = await handler(request)
        except Exception:
            log.exception("control request failed")
            body = {"error": {"type": "InternalError", "message": "Internal error"}}
        with contextlib.suppress(Exception):
            await self._send(msg["from"], {"kind": "reply", "id": msg["id"], "body": body})

    def _wake_queue(self) -> None:
        for callback in self._queued:
            callback()

    @abstractmethod
    async def _send(self, replica_id: str, payload: dict[str, Any]) -> None:
        """Deliver a control payload to a replica."""

    @abstractmethod
    async def ring_queue(self) -> None:
        """Tell every replica (this one included) that a task waits to be claimed."""

    # ---- life ----------------------------------------------------------------------------------

    async def start(self) -> None:  # noqa: B027 - hook for remote buses
        """Connect; called once before use."""

    async def ping(self) -> None:  # noqa: B027 - hook for remote buses
        """Raise if the bus cannot carry messages right now (readiness)."""

    async def aclose(self) -> None:
        for task in list(self._handling):
            task.cancel()
