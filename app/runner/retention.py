"""The retention pass, every `RETENTION_INTERVAL_S` (the first a little after start-up): cancel the tasks left
waiting for input or auth longer than `INPUT_REQUIRED_TTL_S`, then delete the tasks that ended more than
`TASK_RETENTION_DAYS` ago with their rows (`store/retention.py`: small batches, counters kept right).

One replica at a time: a pass runs only while this process holds the pruning turn (`Pruning.turn`, a
PostgreSQL advisory lock); another replica's pass in progress makes this one skip. The cancels go through
the task service like a client's (`cancel`, given by the wiring: the task's role's `TaskService.cancel`),
so the replica holding a waiting task writes the `canceled` status with the reason, streams and webhooks
see it, and the run waiting in that process for the answer is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta

from app import background
from app.protocol.model import utcnow
from app.store.outage import OutageLog
from app.store.retention import Pruning

log = logging.getLogger(__name__)

START_DELAY_S = 60.0
"""How long after start-up the first pass waits (at most the interval): start-up is not slowed."""
PAUSE_S = 0.02
"""Between two batches: the writers' transactions go first."""
EXPIRE_PER_PASS = 500
"""Most waiting tasks one pass cancels (the rest are the next pass's)."""

Cancel = Callable[[str, str, str, str], Awaitable[bool]]
"""(role, owner, task_id, reason) → whether the task was canceled (False: already ended, gone, or its holder
did not answer; a later pass tries again)."""


def expiry_reason(ttl_s: float) -> str:
    """The status message of a task canceled for waiting too long."""
    return (
        f"The task waited more than {ttl_s:g} s for an answer (INPUT_REQUIRED_TTL_S) and was canceled; "
        "send a new message to start again."
    )


@dataclass(eq=False)
class Retention:
    """Runs the retention pass now and then; counts what it did for the metrics."""

    pruning: Pruning
    cancel: Cancel
    """How a waiting task is canceled: the wiring's, through its role's task service."""
    _: KW_ONLY
    retention_days: float
    """0: ended tasks are kept for good."""
    waiting_ttl_s: float
    """0: waiting tasks wait for good."""
    interval_s: float
    pruned_total: int = field(default=0, init=False)
    """Ended tasks deleted by this process's passes (read by the metrics, as the rest)."""
    rows_total: Counter[str] = field(default_factory=Counter, init=False)
    """Rows deleted by this process's passes, by table."""
    expired_total: int = field(default=0, init=False)
    """Waiting tasks this process's passes canceled."""
    last_pass_at: float | None = field(default=None, init=False)
    """Unix time this process last finished a pass (None: none yet)."""
    _loop: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    @property
    def enabled(self) -> bool:
        return bool(self.retention_days or self.waiting_ttl_s)

    async def open(self) -> None:
        if self.enabled:
            self._loop = asyncio.create_task(self._every(), name="retention")

    async def aclose(self) -> None:
        await background.stop(self._loop)
        self._loop = None

    async def _every(self) -> None:
        await asyncio.sleep(min(START_DELAY_S, self.interval_s))
        outage = OutageLog("retention")
        while True:
            try:
                await self.run_once()
                outage.ok()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outage.failed_or_bug(exc, log, "retention pass failed; the next one tries again")
            await asyncio.sleep(self.interval_s)

    async def run_once(self) -> bool:
        """One pass, if this process has the turn; whether it ran."""
        async with self.pruning.turn() as mine:
            if not mine:
                return False
            if self.waiting_ttl_s:
                await self._expire()
            if self.retention_days:
                cutoff = utcnow() - timedelta(days=self.retention_days)
                done = await self.pruning.prune(cutoff, PAUSE_S, self._count)
                if done["tasks"]:
                    log.info(
                        "retention: deleted %d tasks that ended before %s (%s)",
                        done["tasks"],
                        cutoff.isoformat(timespec="seconds"),
                        ", ".join(f"{t} {n}" for t, n in sorted(done.items()) if t != "tasks"),
                    )
            self.last_pass_at = time.time()
        return True

    def _count(self, batch: Counter[str]) -> None:
        self.rows_total.update(batch)
        self.pruned_total += batch["tasks"]

    async def _expire(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.waiting_ttl_s)
        reason = expiry_reason(self.waiting_ttl_s)
        for waiting in await self.pruning.waiting_before(cutoff, EXPIRE_PER_PASS):
            if await self.cancel(waiting.role, waiting.owner, waiting.task_id, reason):
                self.expired_total += 1
                log.info("retention: task %s waited past INPUT_REQUIRED_TTL_S; canceled", waiting.task_id)
