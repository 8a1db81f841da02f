"""Runs agents for tasks in this process: at most `max_concurrent` at once, each under a timeout (one
`run.AgentRun` per task). Here are the slots and the loops: claims of queued tasks, the heartbeat that
renews the runs' leases, the recovery of what this replica's previous life held, and the lost checks.

Tasks beyond the limit wait `submitted`. A cancel runs the agent's cancel hooks (a CLI adapter stops its
process group there) and then cancels the run's coroutine. Only runs alive here have their leases renewed,
so a task whose run is gone is ended by a reaper (`reaper.py`), never left `working`.

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
from typing import TYPE_CHECKING, Protocol

from app.agents.sdk import Agent
from app.protocol.errors import InternalError
from app.protocol.model import Role, TaskState
from app.store.leases import Held
from app.store.outage import OutageLog, is_unavailable
from app.tasks.step import holder_name

from .run import AgentRun, RunSetup, RunTasks, request_for

if TYPE_CHECKING:
    from app.agents.calls import AgentCalls
    from app.agents.checkpoints import CheckpointStore
    from app.protocol.model import Message
    from app.tasks.held import LiveTask

    from .prices import PriceTable

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Longest wait before a background loop tries again after the database failed it."""
DRAIN_S = 30.0
"""How long a draining agent has, beyond the cancel grace, to save its checkpoint at shutdown."""
RUNNING = (TaskState.SUBMITTED, TaskState.WORKING)
"""The states of a task whose agent was running when its run stopped (`Runner._running`)."""


class RunLeases(Protocol):
    """What a runner asks of leases: `Leases` on a replica, `remote.RemoteLeases` in a remote worker."""

    replica_id: str

    async def claim_queued(self, limit: int) -> list[str]: ...
    async def renew(self, task_ids: Collection[str]) -> set[str]: ...
    async def recorded(self, task_id: str) -> tuple[int, str | None] | None: ...
    async def mine(self) -> list[Held]: ...


class QueueBell(Protocol):
    """Where a runner hears that work waits (the bus; a remote worker's claims long-poll instead)."""

    def on_queued(self, callback: Callable[[], None]) -> None: ...


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
        calls: Callable[[LiveTask], AgentCalls] | None = None,
        checkpoints: Callable[[LiveTask], CheckpointStore] | None = None,
    ) -> None:
        """`calls`: each run's calls to other agents, made for its task (`RunSetup.calls`); `checkpoints`:
        each run's checkpoint store (`RunSetup.checkpoints`)."""
        self._tasks = tasks
        self.role = role
        """The role whose agents run here (what a run's log records and span name)."""
        self._leases = leases
        self._agent = agent
        self.pure = agent.pure
        """The agent's runs may start before their task is committed (`Agent.pure`)."""
        self._max = max_concurrent
        self._active = 0
        self._ttl_s = lease_ttl_s
        self._poll_s = queue_poll_s
        self._runs: dict[str, AgentRun] = {}
        self._setup = RunSetup(
            tasks,
            agent,
            role,
            timeout_s,
            cancel_grace_s,
            prices,
            release_slot=self.release_slot,
            over=self._over,
            closing=lambda: self._closing,
            calls=calls,
            checkpoints=checkpoints,
            holder=leases.replica_id,
        )
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

    def alive(self) -> Collection[str]:
        """The tasks whose runs are alive here (the reaper never ends them)."""
        return self._runs.keys()

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
        self._runs[task_id] = AgentRun(task_id, self._setup)

    def _over(self, task_id: str) -> None:
        """A run is over (its slot, if it still held one, is given back by the run)."""
        self._runs.pop(task_id, None)

    async def stop(self, task_id: str) -> None:
        """Stop the task's run: ask the agent to cancel, then cancel its coroutine."""
        run = self._runs.get(task_id)
        if run is not None:
            await run.stop()

    async def answer(self, task_id: str, message: Message) -> None:
        """Hand the user's answer to the waiting run; with no run here (a restart), start a new one."""
        run = self._runs.get(task_id)
        if run is not None and run.ctx is not None:
            run.ctx.deliver(message)
        elif run is None:
            self.start(task_id)

    # ---- life --------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover what this replica's previous life left, then claim and heartbeat. With the database away,
        recovery waits in the claims loop: the replica starts and serves meanwhile."""
        try:
            await self._recover()
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            log.warning("database unavailable at start-up; recovering this replica's tasks once it is back")
        self._loops = [
            asyncio.create_task(self._every(self._claim, self._poll_s, wakeable=True), name="claims"),
            asyncio.create_task(self._every(self._heartbeat, self._ttl_s / 3), name="heartbeat"),
        ]

    async def aclose(self) -> None:
        """Stop taking work and stop every run. A task that was working is drained: its agent saves a
        checkpoint and the task goes on elsewhere (`tasks/resume.py`), or else ends failed with the reason;
        tasks waiting for input are released so any replica can take the answer."""
        self._closing = True
        claims, heartbeat = self._loops or (None, None)
        # The heartbeat goes on while the runs drain: a drain longer than two lease TTLs must not let a
        # reaper take the task (and refuse its checkpoint) before it is handed on.
        stopping = [t for t in (claims, *self._checks.values()) if t is not None]
        for loop in stopping:
            loop.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        ids = list(self._runs)
        running = [t for t in ids if self._running(t)]
        saves = dict(zip(running, await asyncio.gather(*map(self._drain, running)), strict=True))
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        waiting: list[str] = []
        for task_id in ids:
            await self.stop(task_id)
            live = self._tasks.get(task_id)
            if live is None or live.task.status.state.terminal:
                continue
            if task_id in saves and live.task.status.state in RUNNING:
                who = holder_name(self._leases.replica_id, start=True)
                why = f"{who} shut down while this task was running."
                try:
                    not_on = await self._tasks.hand_on(task_id, why) if saves[task_id] else ""
                    if not_on is not None:
                        await self._tasks.fail(task_id, f"{why} The agent's work was lost.{not_on}")
                except Exception:
                    # The database is away: the lease, no longer renewed, lets a reaper end it.
                    log.warning("could not record the end of task %s at shutdown", task_id)
            else:
                waiting.append(task_id)
        with contextlib.suppress(Exception):
            await self._tasks.release(waiting)

    def _running(self, task_id: str) -> bool:
        """Whether the task's agent is running: `working`, or `submitted` with its agent started (its first
        events may still be committing, or committed by a commit its cancelled run never saw the end of).
        At shutdown such a task is drained, then handed on or failed, never released to run again from
        scratch; one whose agent never started (no context yet), or a pure agent's, is released."""
        run = self._runs.get(task_id)
        live = self._tasks.get(task_id)
        if run is None or live is None:
            return False
        state = live.task.status.state
        return state is TaskState.WORKING or (
            state is TaskState.SUBMITTED and run.ctx is not None and not self.pure
        )

    async def _drain(self, task_id: str) -> bool:
        """Have a running task's agent stop and save its checkpoint (`TaskContext.drain`); True if saved."""
        run = self._runs.get(task_id)
        if run is None or run.ctx is None:
            return False
        try:
            async with asyncio.timeout(self._setup.grace_s + DRAIN_S):
                return await run.ctx.drain()
        except Exception:
            log.exception("draining the agent of task %s failed", task_id)
            return False

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
        """Start or hand back what this replica's previous life held; a task it was running (`Held.running`)
        was lost with it, and is the reaper's to end (`reaper.Reaper`)."""
        for held in await self._leases.mine():
            if held.running:
                continue
            if held.state is TaskState.SUBMITTED:
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

    async def reply(self, owner: str, message: Message) -> Message | None:
        """The agent's direct answer to a new message, if it gives one instead of starting a task."""
        try:
            answer = await self._agent.reply(request_for(owner, message, message.context_id or "", [], None))
        except Exception as exc:
            log.exception("agent reply failed")
            raise InternalError(f"The agent failed: {type(exc).__name__}: {exc}") from None
        if answer is not None:
            answer.role = Role.AGENT
            answer.context_id = answer.context_id or message.context_id
        return answer
