"""The bus interface: a doorbell that rings each task's subscribers after an event is committed.

The database is the truth. A subscription may miss or lag (a full queue, a lost message); it reports that
through `lagged`, and the reader fills the gap from the event log by sequence number.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from app.protocol.model import EventRecord


class Subscription:
    """Events of one task in publication order, bounded; overflow sets `lagged` instead of blocking."""

    def __init__(self, task_id: str, maxsize: int = 1024) -> None:
        self.task_id = task_id
        self.lagged = False
        self._queue: asyncio.Queue[EventRecord] = asyncio.Queue(maxsize)
        self._closed = False

    def push(self, record: EventRecord) -> None:
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self.lagged = True

    async def get(self) -> EventRecord:
        return await self._queue.get()

    def drain(self) -> list[EventRecord]:
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items


class Bus(ABC):
    @abstractmethod
    def subscribe(self, task_id: str) -> Subscription:
        """Start receiving the task's events published from now on."""

    @abstractmethod
    def unsubscribe(self, sub: Subscription) -> None: ...

    @abstractmethod
    async def publish(self, task_id: str, records: list[EventRecord]) -> None:
        """Ring the task's subscribers; call only after the records are committed."""

    async def aclose(self) -> None:
        return None
