"""Runs agents for tasks in this process: at most `max_concurrent` at once, each under a timeout.

Tasks beyond the limit wait `submitted`. A run that raises, times out or stops without a result
ends its task `failed` with a reason a client can read; a cancel stops the run's coroutine (and, through
`AgentRun.cancel`, the process an adapter owns).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.agents.base import Agent, AgentEvent, AgentEventKind, AgentRequest, AgentRun
from app.protocol.model import Message, Role, TaskState
from app.tasks.service import TaskService

from .mapping import EventMapper, response_artifact_id

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _Entry:
    task: asyncio.Task[None]
    run: AgentRun | None = None


class Runner:
    def __init__(
        self,
        service: TaskService,
        agent: Agent,
        max_concurrent: int,
        timeout_s: float,
        cancel_grace_s: float,
        lease_ttl_s: float = 15.0,
        queue_poll_s: float = 2.0,
    ) -> None:
        self._service = service
        self._leases = service.leases
        self._agent = agent
        self._max = max_concurrent
        self._active = 0
        self._timeout_s = timeout_s
        self._grace_s = cancel_grace_s
        self._ttl_s = lease_ttl_s
        self._poll_s = queue_poll_s
        self._runs: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False
        service.executor = self
        service.bus.on_queued(self._wake.set)

    @property
    def running(self) -> int:
        return len(self._runs)

    # ---- slots -----------------------------------------------------------------------------------

    def reserve(self) -> bool:
        """Take an agent slot for a task about to start here; False when all are busy or closing."""
        if self._closing or self._active >= self._max:
            return False
        self._active += 1
        return True

    def release_slot(self) -> None:
        self._active -= 1
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
        if entry.run is not None:
            with contextlib.suppress(Exception):
                await entry.run.cancel()
        entry.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(entry.task), self._grace_s + 1)

    async def answer(self, task_id: str, message: Message) -> None:
        """Hand the user's answer to the waiting run; with no run here (a restart), start a new one."""
        entry = self._runs.get(task_id)
        if entry is not None and entry.run is not None:
            await entry.run.answer(message)
        elif entry is None:
            self.start(task_id)

    # ---- life --------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover what this replica's previous life left, then claim, heartbeat and watch leases."""
        await self._recover()
        self._loops = [
            asyncio.create_task(self._every(self._claim, self._poll_s, wakeable=True), name="claims"),
            asyncio.create_task(self._every(self._leases.renew, self._ttl_s / 3), name="heartbeat"),
            asyncio.create_task(self._every(self._reap, min(self._poll_s, self._ttl_s / 5)), name="reaper"),
        ]

    async def aclose(self) -> None:
        """Stop taking work and stop every run. A task that was working ends failed with the reason;
        tasks waiting for input are released so any replica can take the answer."""
        self._closing = True
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        waiting: list[str] = []
        for task_id in list(self._runs):
            await self.stop(task_id)
            live = self._service.live(task_id)
            if live is None:
                continue
            if live.task.status.state is TaskState.WORKING:
                await self._service.fail(task_id, "The server shut down while this task was running.")
            else:
                waiting.append(task_id)
        with contextlib.suppress(Exception):
            await self._service.release(waiting)

    async def _every(
        self, step: Callable[[], Awaitable[object]], interval: float, wakeable: bool = False
    ) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed; retrying", getattr(step, "__name__", "step"))
            if wakeable:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), interval)
                self._wake.clear()
            else:
                await asyncio.sleep(interval)

    async def _recover(self) -> None:
        for held in await self._leases.mine():
            if held.state is TaskState.WORKING:
                reason = "The server restarted while this task was running; its agent was lost."
                await self._service.end_lost(held, reason)
            elif held.state is TaskState.SUBMITTED:
                await self._start_claimed(held.task_id)
            else:
                await self._service.release([held.task_id])

    async def _claim(self) -> None:
        """Claim queued tasks while there are free slots."""
        while not self._closing and (free := self._max - self._active) > 0:
            claimed = await self._leases.claim_queued(free)
            for task_id in claimed:
                await self._start_claimed(task_id)
            if len(claimed) < free:
                return

    async def _start_claimed(self, task_id: str) -> None:
        if self.reserve():
            if await self._service.adopt(task_id):
                self.start(task_id, reserved=True)
                return
            self.release_slot()
        await self._service.release([task_id])

    async def _reap(self) -> None:
        """End tasks whose replica died mid-run (its lease expired). Queued and waiting tasks with an
        expired lease need nothing: claims and answers treat an expired lease as free."""
        for held in await self._leases.expired():
            if held.state is TaskState.WORKING and held.task_id not in self._runs:
                reason = (
                    f"Replica {held.owner} running this task stopped renewing its lease "
                    "(it died or lost contact); the agent's work was lost."
                )
                await self._service.end_lost(held, reason)

    async def _run(self, task_id: str) -> None:
        try:
            await self._run_agent(task_id)
        except asyncio.CancelledError:
            pass
        except Exception:
            # Even ending the task failed (the database is unreachable); its lease will expire.
            log.exception("could not record the end of task %s", task_id)
        finally:
            self._runs.pop(task_id, None)
            self.release_slot()

    async def _run_agent(self, task_id: str) -> None:
        live = self._service.live(task_id)
        if live is None or live.task.status.state.terminal:
            return
        task = live.task
        last_user = max((i for i, m in enumerate(task.history) if m.role is Role.USER), default=None)
        if last_user is None:
            await self._service.fail(task_id, "The task has no user message to work on.")
            return
        request = AgentRequest(
            task_id=task_id,
            context_id=task.context_id,
            message=task.history[last_user],
            history=task.history[:last_user],
        )
        rid = response_artifact_id(task_id)
        mapper = EventMapper(task_id, task.context_id, any(a.artifact_id == rid for a in task.artifacts))
        run: AgentRun | None = None
        try:
            run = self._agent.start(request)
            self._runs[task_id].run = run
            async with asyncio.timeout(self._timeout_s):
                if await self._consume(task_id, run, mapper):
                    return
            await self._service.fail(task_id, "The agent stopped without reporting a result.")
        except TimeoutError:
            await self._cancel_run(run)
            await self._service.fail(
                task_id, f"The agent did not finish within {self._timeout_s:g} s and was stopped."
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("agent run for task %s failed", task_id)
            await self._cancel_run(run)
            await self._service.fail(task_id, f"The agent failed: {type(exc).__name__}: {exc}")

    @staticmethod
    async def _cancel_run(run: AgentRun | None) -> None:
        """Stop what the run owns (a CLI's process group) before its task is reported failed."""
        if run is not None:
            try:
                await run.cancel()
            except Exception:
                log.exception("cancelling an agent run failed")

    async def _consume(self, task_id: str, run: AgentRun, mapper: EventMapper) -> bool:
        """Apply the run's events, each batch that has piled up in one commit; True once the task ended.

        A producer reads the agent while the previous batch commits, so a fast agent costs one
        commit per burst rather than one per event. An exception in the agent is re-raised here.
        """
        queue: asyncio.Queue[AgentEvent | BaseException | None] = asyncio.Queue(maxsize=1024)

        async def produce() -> None:
            try:
                async for ev in run.events():
                    await queue.put(ev)
                await queue.put(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await queue.put(exc)

        producer = asyncio.create_task(produce(), name=f"agent-{task_id}")
        live = self._service.live(task_id)
        try:
            while True:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                events = [i for i in items if isinstance(i, AgentEvent)]
                if events:
                    mapped = mapper.map_batch(events)
                    if (
                        live is not None
                        and live.task.status.state is TaskState.SUBMITTED
                        and events[0].kind is not AgentEventKind.INIT
                    ):
                        mapped.insert(0, mapper.status_working())
                    if await self._service.apply(task_id, mapped):
                        return True
                end = items[-1]
                if isinstance(end, BaseException):
                    raise end
                if end is None:
                    return False
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
