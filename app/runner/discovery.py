"""Discovery: this process announces one instance per role it runs agents for, and lists who is live.

Each instance is named `role:instance_id` (the discovery identity); clients route by role, never by
instance. `start()` registers at once and refreshes every `heartbeat_s` (`last_seen`, and the slots and
running agents of each role), waiting out database outages like the runner's loops; `aclose()` deletes this
process's rows so it leaves the listing at once. A process that dies without `aclose()` drops out of `live()`
when not seen for `max_age_s`; its rows are deleted lazily later (`store.instances`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app import background
from app.protocol.model import utcnow
from app.store.instances import InstanceRecord, Instances, Kind, instance_name
from app.store.outage import OutageLog

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""After a failed refresh (the database away), the next try comes within this."""
FIRST_WAIT_S = 2.0
"""Longest start-up waits for the first registration (the database may be away)."""
FORGET_TIMEOUT_S = 3.0
"""Longest a clean shutdown waits to delete this process's rows (the database may be away: then they age
out)."""


@dataclass(slots=True, frozen=True)
class Instance:
    """What this process runs for one role, as discovery shows it: the role as its card describes it (an
    `InstanceRecord` whose instance, kind and load its announcer fills in), and its load here."""

    described: InstanceRecord
    slots: int = 0
    running: Callable[[], int] = lambda: 0
    """The role's agent runs here now, read at each heartbeat."""

    @property
    def role(self) -> str:
        return self.described.role


class Discovery:
    def __init__(
        self,
        store: Instances,
        kind: Kind,
        instance_id: str,
        heartbeat_s: float,
        max_age_s: float,
        instances: Sequence[Instance],
    ) -> None:
        self._store = store
        self.kind: Kind = kind
        self.instance_id = instance_id
        self.heartbeat_s = heartbeat_s
        self.max_age_s = max_age_s
        self._instances = tuple(instances)
        self._started_at = utcnow()
        self._loop: asyncio.Task[None] | None = None
        self._outage = OutageLog("discovery heartbeat")

    @property
    def names(self) -> list[str]:
        """This process's instance names (`role:instance_id`)."""
        return [instance_name(i.role, self.instance_id) for i in self._instances]

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles this process runs."""
        return tuple(i.role for i in self._instances)

    def records(self) -> list[InstanceRecord]:
        """This process's instances as they stand now."""
        return [
            i.described.announced(self.instance_id, self.kind, i.slots, i.running(), self._started_at)
            for i in self._instances
        ]

    async def start(self) -> None:
        """Register now, then refresh every heartbeat. Start-up waits for the first registration at most
        `FIRST_WAIT_S`: with the database away it goes on, and the loop keeps trying."""
        if self._loop is not None:
            return
        first = asyncio.Event()
        self._loop = asyncio.create_task(self._every(first), name="discovery")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_WAIT_S):
                await first.wait()

    async def aclose(self) -> None:
        """Stop refreshing and delete this process's rows (within `FORGET_TIMEOUT_S`, else they age out)."""
        await background.stop(self._loop)
        self._loop = None
        try:
            async with asyncio.timeout(FORGET_TIMEOUT_S):
                await self._store.forget(self.names)
        except Exception as exc:
            log.warning(
                "discovery: could not remove %s at shutdown (%s); they drop out after %g s",
                ", ".join(self.names),
                type(exc).__name__,
                self.max_age_s,
            )

    async def available(self, role: str) -> bool:
        """Whether any process (a replica or a remote worker) runs the role now."""
        return any(i.role == role for i in await self.live())

    async def live(self) -> list[InstanceRecord]:
        """Every instance (of any process) seen within the maximum age, by role then name."""
        return await self._store.live(self.max_age_s)

    async def _beat(self) -> bool:
        """One refresh; False when the database is away (logged once per outage)."""
        try:
            await self._store.upsert(self.records())
            self._outage.ok()
            await self._store.purge_stale(self.max_age_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._outage.failed_or_bug(exc, log, "discovery heartbeat failed; retrying"):
                return False
        return True

    async def _every(self, first: asyncio.Event) -> None:
        while True:
            ok = await self._beat()
            first.set()
            await asyncio.sleep(self.heartbeat_s if ok else min(self.heartbeat_s, RETRY_S))
