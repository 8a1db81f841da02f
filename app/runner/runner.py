"""Runs agents for tasks in this process: at most `max_concurrent` at once, each under a timeout.

Tasks beyond the limit wait `submitted`. A run that raises or times out ends its task `failed`
with a reason a client can read; a run that returns completes it. A cancel runs the agent's cancel hooks
(a CLI adapter stops its process group there) and then cancels the run's coroutine.

While the database is away a run keeps what its agent emits (up to `RUN_BUFFER` items; then the agent is
paused, its emit waiting) and commits it in order once the database is back, for up to the outage grace;
past it the agent is stopped and the task ends `failed` as soon as the database answers. Only runs alive
here have their leases renewed, so a task whose run is gone is ended by a reaper, never left `working`.

A run whose task was ended or taken over elsewhere (reaped, canceled, its lease taken) is stopped at once,
its process tree with it: its next commit collides with the other replica's event numbers, a notice comes
over the bus (`lost`), and the heartbeat finds its lease no longer renewable; each is checked against the
database under the task's lock before the run is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

from app.agents.sdk import Agent, Request, TaskContext, response_artifact_id
from app.protocol.errors import InternalError
from app.protocol.model import ArtifactUpdate, Part, Role, StatusUpdate, TaskState, status_update
from app.store.leases import Held
from app.store.outage import OutageLog, is_unavailable
from app.tasks.live import WORKER_PREFIX, LiveTask, StillbornError, TaskLostError, UnrecordedError
from app.telemetry import logs, traces

if TYPE_CHECKING:
    from app.protocol.model import Event, Message

    from .prices import PriceTable

log = logging.getLogger(__name__)

STRAGGLER_S = 0.2
"""How long an agent whose task has ended gets to return before its cancel hooks stop it."""
RUN_BUFFER = 1024
"""Emitted items a run holds while its last batch commits (or waits for the database); a full buffer
pauses the agent (its emit waits), which in turn stops reading its CLI's output."""
RETRY_S = 1.0
"""Longest wait before a background loop tries again after the database failed it."""


class RunTasks(Protocol):
    """What a runner reads and changes of its runs' tasks: `LiveTasks` on a replica, `worker.RemoteTasks`
    in a remote worker."""

    outage_grace_s: float

    def get(self, task_id: str) -> LiveTask | None: ...
    async def adopt(self, task_id: str) -> bool: ...
    async def record(self, task_id: str, events: list[Event]) -> bool: ...
    async def fail(self, task_id: str, reason: str, wait: bool = False) -> None: ...
    def forget(self, task_id: str) -> None: ...
    def lose(self, task_id: str) -> bool: ...
    async def release(self, task_ids: list[str]) -> None: ...
    async def end_lost(self, held: Held, reason: str, *, restarted: bool = False) -> bool: ...
    async def webhooked(self, task_ids: list[str]) -> set[str]: ...
    def resync(self, task_id: str) -> None: ...


class RunLeases(Protocol):
    """What a runner asks of leases: `Leases` on a replica, `worker.RemoteLeases` in a remote worker."""

    replica_id: str

    async def claim_queued(self, limit: int) -> list[str]: ...
    async def renew(self, task_ids: Collection[str]) -> set[str]: ...
    async def recorded(self, task_id: str) -> tuple[int, str | None] | None: ...
    async def mine(self) -> list[Held]: ...
    async def suspect(self) -> int: ...
    async def expired(self) -> list[Held]: ...


class QueueBell(Protocol):
    """Where a runner hears that work waits (the bus; a remote worker's claims long-poll instead)."""

    def on_queued(self, callback: Callable[[], None]) -> None: ...


@dataclass(slots=True, eq=False)
class _Entry:
    task: asyncio.Task[None]
    ctx: TaskContext | None = None
    slot: bool = True
    """The run holds an agent slot: until its task ends (`_ended`), or else until the run is over."""


class Runner:
    """Runs the agents of the live tasks held here (`tasks`); the task service's `Executor`."""

    def __init__(
        self,
        tasks: RunTasks,
        leases: RunLeases,
        bus: QueueBell,
        agent: Agent,
        max_concurrent: int,
        timeout_s: float,
        cancel_grace_s: float,
        lease_ttl_s: float = 15.0,
        queue_poll_s: float = 2.0,
        prices: PriceTable | None = None,
        role: str = "default",
    ) -> None:
        self._tasks = tasks
        self.role = role
        """The role whose agents run here (what a run's log records and span name)."""
        self._prices = prices
        """Prices the tokens of the usage reports whose agent gives no cost (PRICE_TABLE_FILE)."""
        self._leases = leases
        self._agent = agent
        self.pure = agent.pure
        """The agent's runs may start before their task is committed (`Agent.pure`)."""
        self._max = max_concurrent
        self._active = 0
        self._timeout_s = timeout_s
        self._grace_s = cancel_grace_s
        self._ttl_s = lease_ttl_s
        self._poll_s = queue_poll_s
        self._runs: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        self._backlog = True
        """Whether tasks may be waiting to be claimed: a freed slot then claims at once. Cleared by a claim
        that finds fewer than it could take, set by the queue doorbell (this replica's or another's) and by
        a claim that filled every slot; the poll every `queue_poll_s` claims whatever the flag says."""
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False
        self._recovered = False
        self._checks: dict[str, asyncio.Task[None]] = {}
        self._taken: dict[str, int] = {}
        """Tasks taken over with nothing written yet (their last event number then): `_heard`."""
        bus.on_queued(self._queued)

    @property
    def running(self) -> int:
        return len(self._runs)

    @property
    def slots(self) -> int:
        """Agent runs allowed at once here."""
        return self._max

    # ---- slots -----------------------------------------------------------------------------------

    def reserve(self) -> bool:
        """Take an agent slot for a task about to start here; False when all are busy or closing."""
        if self._closing or self._active >= self._max:
            return False
        self._active += 1
        return True

    def release_slot(self) -> None:
        self._active -= 1
        # Claiming costs a transaction: a slot freed with nothing waiting (the usual end of a run) skips it.
        if self._backlog:
            self._wake.set()

    def _queued(self) -> None:
        """The queue doorbell: work waits somewhere in the cluster."""
        self._backlog = True
        self._wake.set()

    def start(self, task_id: str, reserved: bool = False) -> None:
        """Run the task's agent here. Without a reservation (an answer resuming a task) it runs anyway."""
        if task_id in self._runs:
            if reserved:
                self.release_slot()
            return
        if not reserved:
            self._active += 1
        entry = _Entry(asyncio.create_task(self._run(task_id), name=f"run-{task_id}"))
        self._runs[task_id] = entry

    async def stop(self, task_id: str) -> None:
        """Stop the task's run: ask the agent to cancel, then cancel its coroutine."""
        entry = self._runs.get(task_id)
        if entry is None:
            return
        if entry.ctx is not None:
            try:
                async with asyncio.timeout(self._grace_s + 1):
                    await entry.ctx.cancel()
            except Exception:
                log.exception("cancelling the agent of task %s failed", task_id)
        entry.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(entry.task), self._grace_s + 1)

    async def answer(self, task_id: str, message: Message) -> None:
        """Hand the user's answer to the waiting run; with no run here (a restart), start a new one."""
        entry = self._runs.get(task_id)
        if entry is not None and entry.ctx is not None:
            entry.ctx.deliver(message)
        elif entry is None:
            self.start(task_id)

    # ---- life --------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover what this replica's previous life left, then claim, heartbeat and watch leases. With the
        database away, recovery waits in the claims loop: the replica starts and serves meanwhile."""
        try:
            await self._recover()
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            log.warning("database unavailable at start-up; recovering this replica's tasks once it is back")
        self._loops = [
            asyncio.create_task(self._every(self._claim, self._poll_s, wakeable=True), name="claims"),
            asyncio.create_task(self._every(self._heartbeat, self._ttl_s / 3), name="heartbeat"),
            asyncio.create_task(self._every(self._reap, min(self._poll_s, self._ttl_s / 5)), name="reaper"),
        ]

    async def aclose(self) -> None:
        """Stop taking work and stop every run. A task that was working ends failed with the reason;
        tasks waiting for input are released so any replica can take the answer."""
        self._closing = True
        for loop in (*self._loops, *self._checks.values()):
            loop.cancel()
        await asyncio.gather(*self._loops, *self._checks.values(), return_exceptions=True)
        waiting: list[str] = []
        for task_id in list(self._runs):
            await self.stop(task_id)
            live = self._tasks.get(task_id)
            if live is None:
                continue
            if live.task.status.state is TaskState.WORKING:
                try:
                    await self._tasks.fail(task_id, "The server shut down while this task was running.")
                except Exception:
                    # The database is away: the lease, no longer renewed, lets a reaper end it.
                    log.warning("could not record the end of task %s at shutdown", task_id)
            else:
                waiting.append(task_id)
        with contextlib.suppress(Exception):
            await self._tasks.release(waiting)

    async def _every(
        self,
        step: Callable[[], Awaitable[object]],
        interval: float,
        wakeable: bool = False,
    ) -> None:
        """Run `step` every `interval` for good; after a failure from an outage, within `RETRY_S`."""
        name = getattr(step, "__name__", "step").lstrip("_")
        outage = OutageLog(f"runner {name}")
        while True:
            wait = interval
            try:
                await step()
                outage.ok()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if outage.failed_or_bug(exc, log, "%s failed; retrying", name):
                    wait = min(interval, RETRY_S)
            if wakeable:
                # Not `wait_for`: on Python 3.11 it swallows a cancel that arrives as the wake is set (a run
                # ending during `aclose`), and this loop would never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                self._wake.clear()
            else:
                await asyncio.sleep(wait)

    async def _heartbeat(self) -> None:
        """Renew the leases of the runs alive here; a run whose lease could not be renewed lost its task."""
        runs = list(self._runs)
        renewed = await self._leases.renew(runs)
        for task_id in runs:
            if task_id not in renewed:
                self.lost(task_id)
        await self._heard()
        await self._webhooks(runs)

    async def _webhooks(self, runs: list[str]) -> None:
        """Have the runs alive here whose tasks gained a webhook elsewhere notify it from now on.

        The replica that stores a webhook tells the holder over the bus (`Control.webhook_added`); a word
        lost there (Redis restarting, the holder slow to answer) would leave the task's later events
        without notifications for good. So each heartbeat looks up the webhooks of the runs not notifying:
        a missed word costs at most `LEASE_TTL_S`/3 of events, not the rest of the task."""
        quiet = [t for t in runs if (live := self._tasks.get(t)) is not None and not live.push]
        for task_id in await self._tasks.webhooked(quiet):
            live = self._tasks.get(task_id)
            if live is not None and not live.push:
                live.push = True

    async def _heard(self) -> None:
        """Send this replica's followers of a task taken from it to its log once the taker has written.

        A taker this bus does not reach (the admin command line without `REDIS_URL`, or on another bus)
        takes the lease and then writes: if this replica found its lease gone in between, its followers
        read a log with nothing new at the loss, and no bus would ring them for the write that follows."""
        for task_id, seq in list(self._taken.items()):
            stored = await self._leases.recorded(task_id)
            if stored is None or stored[0] != seq:
                del self._taken[task_id]
                self._tasks.resync(task_id)

    def lost(self, task_id: str) -> None:
        """The task may have been ended or taken over elsewhere: check, and stop its run if so."""
        if task_id in self._runs and task_id not in self._checks and not self._closing:
            check = asyncio.create_task(self._check_lost(task_id), name=f"lost-{task_id}")
            self._checks[task_id] = check
            check.add_done_callback(lambda _: self._checks.pop(task_id, None))

    async def _check_lost(self, task_id: str) -> None:
        """Stop the task's run unless the database still has it as this replica's, as the run left it.

        Compared under the task's lock, so no commit of the run is half done: a task ended here, or one
        whose lease and last event are still ours, is left alone."""
        live = self._tasks.get(task_id)
        if live is None or live.unborn is not None:
            # Ended here, dropped by a commit that collided (the run stops itself), or not stored yet.
            return
        async with live.lock:
            if live.task.status.state.terminal or self._tasks.get(task_id) is not live:
                return
            try:
                stored = await self._leases.recorded(task_id)
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("could not check whether task %s is still held here", task_id)
                return  # the database is away: the next heartbeat asks again
            if stored == (live.seq, self._leases.replica_id):
                return
            self._tasks.lose(task_id)
            if stored is not None and stored[0] == live.seq:
                self._taken[task_id] = live.seq
        log.warning(
            "task %s was ended or taken over by another replica (stored: %s); stopping its agent",
            task_id,
            stored,
        )
        await self.stop(task_id)

    async def _recover(self) -> None:
        for held in await self._leases.mine():
            if held.running:  # its agent had started: lost with the previous life, never run again
                reason = "The server restarted while this task was running; its agent was lost."
                await self._tasks.end_lost(held, reason, restarted=True)
            elif held.state is TaskState.SUBMITTED:
                await self._start_claimed(held.task_id)
            else:
                await self._tasks.release([held.task_id])
        self._recovered = True

    async def _claim(self) -> None:
        """Claim queued tasks while there are free slots (once this replica's own are recovered)."""
        if not self._recovered:
            await self._recover()
        while not self._closing and (free := self._max - self._active) > 0:
            # Cleared before the query: a doorbell rung while it runs sets it again (and wakes the loop).
            self._backlog = False
            try:
                claimed = await self._leases.claim_queued(free)
            except BaseException:
                self._backlog = True  # unknown: the retry claims again
                raise
            for task_id in claimed:
                await self._start_claimed(task_id)
            if len(claimed) < free:
                return
        # Every slot is taken: what may still wait is claimed as soon as one frees.
        self._backlog = True

    async def _start_claimed(self, task_id: str) -> None:
        if self.reserve():
            try:
                adopted = await self._tasks.adopt(task_id)
            except BaseException:
                self.release_slot()  # the claim, never renewed, expires and the task is claimed again
                raise
            if adopted:
                self.start(task_id, reserved=True)
                return
            self.release_slot()
        await self._tasks.release([task_id])

    async def _reap(self) -> None:
        """End tasks whose replica died mid-run: mark the leases found expired (`Leases.suspect`), end the
        working tasks whose lease stayed unrenewed a lease TTL after its mark (`Leases.expired`). Queued
        and waiting tasks need nothing: claims take a void lease, answers an expired one."""
        await reap(self._leases, self._tasks, self._runs)

    async def _run(self, task_id: str) -> None:
        live = self._tasks.get(task_id)
        # A run is its own unit of work in the logs (not the request that may have started it), and its
        # span continues the trace of the request that created the task, wherever that was served.
        logs.scope(
            task_id=task_id,
            context_id=live.task.context_id if live else None,
            role=self.role,
            principal=live.owner if live else None,
        )
        attributes = {"a2a.task_id": task_id, "a2a.role": self.role}
        with traces.span("agent.run", traceparent=live.traceparent if live else None, attributes=attributes):
            await self._run_traced(task_id)

    async def _run_traced(self, task_id: str) -> None:
        try:
            await self._run_agent(task_id)
        except asyncio.CancelledError:
            pass
        except StillbornError:
            log.debug("task %s was not stored (a copy stored first, or the database is away)", task_id)
        except TaskLostError:
            log.warning("task %s was ended or taken over by another replica; its agent was stopped", task_id)
        except UnrecordedError:
            log.warning(
                "task %s: the database was unreachable for more than %g s (DB_OUTAGE_GRACE_S); its agent was "
                "stopped, and the task fails once the database is back",
                task_id,
                self._tasks.outage_grace_s,
            )
            await self._fail_when_back(
                task_id,
                f"The database was unreachable for more than {self._tasks.outage_grace_s:g} s; the agent "
                "was stopped and its output since then could not be recorded.",
            )
        except Exception:
            # Ending the task failed too: its lease, no longer renewed, lets a reaper end it.
            log.exception("could not record the end of task %s", task_id)
        finally:
            if not self._closing:
                self._tasks.forget(task_id)
            entry = self._runs.pop(task_id, None)
            if entry is None or entry.slot:
                self.release_slot()

    def _ended(self, entry: _Entry) -> None:
        """The run's task has ended: its slot is free for the next task, while the run cleans up."""
        if entry.slot:
            entry.slot = False
            self.release_slot()

    async def _fail_when_back(self, task_id: str, reason: str) -> None:
        """End the task `failed` as soon as the database takes it (the lease stays renewed meanwhile)."""
        delay = 0.2
        while not self._closing:
            try:
                await self._tasks.fail(task_id, reason)
                return
            except TaskLostError:
                log.warning("task %s was ended or taken over by another replica meanwhile", task_id)
                return
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("could not record the end of task %s", task_id)
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_S * 2)

    def _request(
        self, owner: str, message: Message, context_id: str, history: list[Message], task_id: str | None
    ) -> Request:
        return Request(
            message=message,
            context_id=context_id,
            principal=owner,
            task_id=task_id,
            history=history,
            extensions=tuple(dict.fromkeys(message.requested_extensions + message.extensions)),
            active_extensions=tuple(message.active_extensions),
        )

    async def reply(self, owner: str, message: Message) -> Message | None:
        """The agent's direct answer to a new message, if it gives one instead of starting a task."""
        try:
            answer = await self._agent.reply(
                self._request(owner, message, message.context_id or "", [], None)
            )
        except Exception as exc:
            log.exception("agent reply failed")
            raise InternalError(f"The agent failed: {type(exc).__name__}: {exc}") from None
        if answer is not None:
            answer.role = Role.AGENT
            answer.context_id = answer.context_id or message.context_id
        return answer

    async def _run_agent(self, task_id: str) -> None:
        live = self._tasks.get(task_id)
        if live is None or live.task.status.state.terminal:
            return
        task = live.task
        last_user = max((i for i, m in enumerate(task.history) if m.role is Role.USER), default=None)
        if last_user is None:
            await self._tasks.fail(task_id, "The task has no user message to work on.")
            return
        message = task.history[last_user]
        request = self._request(live.owner, message, task.context_id, task.history[:last_user], task_id)
        rid = response_artifact_id(task_id)
        started = any(a.artifact_id == rid for a in task.artifacts)
        queue: asyncio.Queue[list[Event] | BaseException | None] = asyncio.Queue(maxsize=RUN_BUFFER)
        price = self._prices.price if self._prices is not None else None
        ctx = TaskContext(request, task_id, queue.put, response_started=started, price=price)
        entry = self._runs[task_id]
        entry.ctx = ctx
        live.on_end = partial(self._ended, entry)
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._consume(task_id, ctx, queue)
        except TimeoutError:
            await _stop(ctx)
            await self._tasks.fail(
                task_id, f"The agent did not finish within {self._timeout_s:g} s and was stopped.", wait=True
            )

    async def _consume(
        self, task_id: str, ctx: TaskContext, queue: asyncio.Queue[list[Event] | BaseException | None]
    ) -> None:
        """Apply what the agent emits, each batch that has piled up in one commit, until the task ends.

        The agent runs as its own task while the previous batch commits, so a fast agent costs one
        commit per burst rather than one per event. Returning from `run` completes the task; an
        exception fails it with the exception's text.
        """

        async def produce() -> None:
            try:
                await self._agent.run(ctx)
                if not ctx.finished:
                    await ctx.complete()
                await queue.put(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await queue.put(exc)

        producer = asyncio.create_task(produce(), name=f"agent-{task_id}")
        live = self._tasks.get(task_id)
        lost = False
        try:
            while True:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                events = _merge_closing_chunks([e for i in items if isinstance(i, list) for e in i])
                if events:
                    if live is not None and live.task.status.state is TaskState.SUBMITTED:
                        if not _is_working(events[0]):
                            events.insert(0, _working(task_id, live.task.context_id, events))
                    try:
                        if await self._tasks.record(task_id, events):
                            return
                    except TaskLostError:
                        lost = True
                        await _stop(ctx)  # at once: no straggler's grace for a task that is not ours
                        raise
                end = items[-1]
                if isinstance(end, BaseException):
                    log.error("agent run for task %s failed", task_id, exc_info=end)
                    await _stop(ctx)
                    await self._tasks.fail(
                        task_id, f"The agent failed: {type(end).__name__}: {end}", wait=True
                    )
                    return
                if end is None:
                    await self._tasks.fail(
                        task_id, "The agent stopped without reporting a result.", wait=True
                    )
                    return
        finally:
            if not producer.done() and not lost:
                # The task ended while the agent still runs (it failed it, or emitted after the end):
                # give it a moment to return, then stop what it owns before cancelling it.
                await asyncio.wait({producer}, timeout=STRAGGLER_S)
                if not producer.done():
                    await _stop(ctx)
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer


async def reap(leases: RunLeases, tasks: RunTasks, alive: Collection[str] = ()) -> None:
    """One pass of a reaper (a runner's, or `Idle`'s for a role not run here): mark the leases found expired,
    end the running tasks (`Held.running`: working, or submitted with a run started) whose lease stayed void.
    Never a run in `alive`: the one guard against a reaper ending a live run of its own replica."""
    await leases.suspect()
    for held in await leases.expired():
        if held.running and held.task_id not in alive:
            await tasks.end_lost(held, lost_reason(held.owner))


def lost_reason(holder: str) -> str:
    """Why a reaper ended a task: its holder (a replica, or a remote worker) stopped renewing its lease."""
    who = (
        f"Worker {holder.removeprefix(WORKER_PREFIX)}"
        if holder.startswith(WORKER_PREFIX)
        else f"Replica {holder}"
    )
    return (
        f"{who} running this task stopped renewing its lease (it died or lost contact); "
        "the agent's work was lost."
    )


async def _stop(ctx: TaskContext) -> None:
    """Run the agent's cancel hooks (a CLI adapter kills its process group), whatever they raise."""
    try:
        await ctx.cancel()
    except Exception:
        log.exception("stopping the agent of task %s failed", ctx.task_id)


def _working(task_id: str, context_id: str, events: list[Event]) -> StatusUpdate:
    """The working status a run's first batch starts with, stamped no later than the batch's first status
    (which the agent stamped when it emitted it), so the recorded transitions stay in time order."""
    working = status_update(task_id, context_id, TaskState.WORKING)
    first = next((e.status.timestamp for e in events if isinstance(e, StatusUpdate)), None)
    if first is not None and first < working.status.timestamp:
        working.status.timestamp = first
    return working


def _is_working(event: Event) -> bool:
    """The agent's own `working` status: a run that starts with one needs no second from the runner."""
    return isinstance(event, StatusUpdate) and event.status.state is TaskState.WORKING


def _merge_closing_chunks(events: list[Event]) -> list[Event]:
    """Fold an empty closing chunk into the chunk of the same artifact just before it in the batch, so
    the real last chunk carries `lastChunk` and no empty chunk is stored."""
    out: list[Event] = []
    for ev in events:
        prev = out[-1] if out else None
        if (
            isinstance(ev, ArtifactUpdate)
            and ev.append
            and ev.last_chunk
            and ev.artifact.parts == [Part(text="")]
            and isinstance(prev, ArtifactUpdate)
            and prev.artifact.artifact_id == ev.artifact.artifact_id
            and not prev.last_chunk
        ):
            prev.last_chunk = True
            continue
        out.append(ev)
    return out
