"""The single-node bus: subscribers live in this process."""

from __future__ import annotations

from app.protocol.model import EventRecord

from .base import Bus, Subscription


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._subs: dict[str, set[Subscription]] = {}

    def subscribe(self, task_id: str) -> Subscription:
        sub = Subscription(task_id)
        self._subs.setdefault(task_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.task_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.task_id]

    async def publish(self, task_id: str, records: list[EventRecord]) -> None:
        for sub in self._subs.get(task_id, ()):
            for record in records:
                sub.push(record)
