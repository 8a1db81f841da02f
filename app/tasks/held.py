"""A task held here (`LiveTask`: the in-memory truth between its commits) and the errors of holding one.

Both sides of a run share these: the replica's live tasks (`live.py`) and the runner that runs their agents
(`runner/runner.py`, `runner/run.py`), and a remote worker's stand-in for them (`runner/remote.py`). It
imports `step.py` and the protocol's types only, so the runner and the worker need nothing of the replica's
hub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .step import Snapshot

if TYPE_CHECKING:
    from app.protocol.model import Task

    from .step import Unborn


@dataclass(slots=True, eq=False)
class LiveTask:
    """A task this process writes: the in-memory truth between commits, serialised by `lock`."""

    task: Task
    owner: str
    seq: int
    push: bool = False
    """The task has webhooks: its events also go to the push outbox (built only then)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: list[asyncio.Future[Snapshot]] = field(default_factory=list)
    stalled: bool = False
    """Its run is waiting for the database to take its events: other writers fail at once, not queue."""
    artifact_rows: int | None = None
    """How many artifact rows the task has stored (None: unknown). When it ends with exactly one row per
    artifact, its rows are already folded and the compaction is skipped."""
    holder: str | None = None
    """Who holds its lease when not this replica: a remote worker (`tasks/workers.py`), for whom this
    replica writes; its commits keep the lease the worker's."""
    traceparent: str | None = None
    """The W3C trace context of the request that created the task (tracing on): its runs continue it."""
    retries: int = 0
    """How often a write that collides is made again on the task re-read: a request's write to a remote
    worker's task, which the worker writes meanwhile through any replica (its own batches never retry)."""
    on_end: Callable[[], None] | None = None
    """Called as the task ends, before the requests waiting for it wake: its run gives back its agent slot
    then, not after its clean-up, so the caller's next send finds the slot free."""
    unborn: Unborn | None = None
    """Its creation, while not yet committed (`LiveTasks.stage`): nobody but its run and the request
    that made it sees the task until then."""

    def snapshot(self) -> Snapshot:
        return Snapshot(self.task.with_history(None), self.seq)


class HeldElsewhereError(Exception):
    """Another replica holds the task's lease: only it may write the task."""

    def __init__(self, replica_id: str) -> None:
        super().__init__(replica_id)
        self.replica_id = replica_id


class TaskLostError(Exception):
    """The task was ended or taken over by another replica while its run was here: the run must stop."""


class StillbornError(TaskLostError):
    """A staged task's creation failed with its run's first step (a concurrent copy stored first, or the
    database is away): the request that made it answers, the run stops quietly."""


class UnrecordedError(Exception):
    """A run's events could not be committed within the outage grace: the database stayed away."""
