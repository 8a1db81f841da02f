"""The `lost` notice: telling a replica that a task it runs was taken over or ended here, so it stops the
run at once (`control.Control.handle` serves it there). If the bus cannot reach it, its heartbeat finds out
(`Leases.renew`); a remote worker finds out from its next sync or commit, so it is never told.

It imports the bus and `step.py`; the live tasks (a request's lease taken over) and `losses.py` (a lost
task ended) send through it.
"""

from __future__ import annotations

import asyncio
import logging

from app.bus.base import Bus

from .step import WORKER_PREFIX

log = logging.getLogger(__name__)

LOST_NOTICE_S = 2.0
"""How long a notice to a replica that lost a task waits for its acknowledgement."""


class LostNotices:
    """The `lost` notices one role's tasks send, each in the background."""

    def __init__(self, bus: Bus, role: str | None) -> None:
        self._bus = bus
        self._role = role
        self._flying: set[asyncio.Task[None]] = set()

    def tell(self, replica_id: str, task_id: str) -> None:
        """Tell the replica whose lease on the task was taken (or whose task was ended) here."""
        if replica_id.startswith(WORKER_PREFIX):
            return

        async def tell() -> None:
            try:
                body = {"op": "lost", "task": task_id, "role": self._role}
                await self._bus.request(replica_id, body, LOST_NOTICE_S)
            except Exception:
                log.info("replica %s did not hear that task %s was taken from it", replica_id, task_id)

        notice = asyncio.create_task(tell(), name=f"lost-{task_id}")
        self._flying.add(notice)
        notice.add_done_callback(self._flying.discard)

    async def sent(self) -> None:
        """Wait for the notices in flight (each waits at most LOST_NOTICE_S for its answer)."""
        await asyncio.gather(*self._flying, return_exceptions=True)
