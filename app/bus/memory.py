"""The single-node bus: subscribers and the only replica live in this process."""

from __future__ import annotations

from typing import Any

from app.protocol.events import EventRecord
from app.telemetry import traces

from .base import Bus, publish_attributes


class MemoryBus(Bus):
    async def publish(self, task_id: str, context_id: str, records: list[EventRecord]) -> None:
        with traces.span("bus.publish", attributes=publish_attributes(task_id, records)):
            self._deliver(task_id, records)

    async def _send(self, replica_id: str, payload: dict[str, Any]) -> None:
        if replica_id != self.replica_id:
            # No other replica listens on an in-process bus: a request to one fails now, not after its wait.
            raise TimeoutError(f"replica {replica_id} is not on this in-process bus")
        await self._on_control_message(payload)

    async def ring_queue(self) -> None:
        self._wake_queue()
