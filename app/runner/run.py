"""One agent run of one task (`AgentRun`): its `TaskContext`, the queue between the agent and its commits,
and how it ends. The runner (`runner.py`) keeps the slots and the loops, and makes one per run it starts.

A run that raises or times out ends its task `failed` with a reason a client can read; a run that returns
completes it. While the database is away a run keeps what its agent emits (up to `RUN_BUFFER` items; then
the agent is paused, its emit waiting) and commits it in order once the database is back, for up to the
outage grace; past it the agent is stopped and the task ends `failed` as soon as the database answers. A
run whose next commit finds its task taken (`TaskLostError`) stops its agent at once.

It imports the agents' SDK, the protocol's types, `tasks/held.py` and the outage helpers, never `runner.py`:
what it gives back to the runner (its agent slot, its end) goes through the callbacks of its `RunSetup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.agents.checkpoints import Resumed
from app.agents.emissions import response_artifact_id
from app.agents.sdk import Agent, Request, TaskContext
from app.agents.workspace import serve
from app.protocol.attempts import resume_of
from app.protocol.events import ArtifactUpdate, StatusUpdate, status_update
from app.protocol.model import Part, Role, TaskState
from app.protocol.task_options import chosen_model, run_timeout
from app.store.outage import backoff, is_unavailable
from app.tasks.held import LiveTask, StillbornError, TaskLostError, UnrecordedError
from app.tasks.step import holder_name
from app.telemetry import logs, traces

from .run_calls import RunCalls

if TYPE_CHECKING:
    from app.agents.calls import AgentCalls
    from app.agents.checkpoints import CheckpointStore
    from app.protocol.events import Event
    from app.protocol.model import Message, Task

    from .prices import PriceTable

log = logging.getLogger(__name__)

STRAGGLER_S = 0.2
"""How long an agent whose task has ended gets to return before its cancel hooks stop it."""
RUN_BUFFER = 1024
"""Emitted items a run holds while its last batch commits (or waits for the database); a full buffer
pauses the agent (its emit waits), which in turn stops reading its CLI's output."""


class RunTasks(Protocol):
    """What a runner and its runs read and change of their tasks: `LiveTasks` on a replica,
    `remote.RemoteTasks` in a remote worker."""

    outage_grace_s: float

    def get(self, task_id: str) -> LiveTask | None: ...
    async def adopt(self, task_id: str) -> bool: ...
    async def record(self, task_id: str, events: list[Event]) -> bool: ...
    async def fail(self, task_id: str, reason: str, wait: bool = False) -> None: ...
    def forget(self, task_id: str) -> None: ...
    def lose(self, task_id: str) -> bool: ...
    async def release(self, task_ids: list[str]) -> None: ...
    async def hand_on(self, task_id: str, why: str) -> str | None: ...
    async def webhooked(self, task_ids: list[str]) -> set[str]: ...
    def resync(self, task_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class RunSetup:
    """What every run of one runner shares, and the callbacks through which a run gives back to it."""

    tasks: RunTasks
    agent: Agent
    role: str
    """The role whose agents run (what a run's log records and span name)."""
    timeout_s: float
    grace_s: float
    """How long a stopped agent's cancel hooks and coroutine get (`CANCEL_GRACE_S`), plus a second."""
    prices: PriceTable | None
    """Prices the tokens of the usage reports whose agent gives no cost (PRICE_TABLE_FILE)."""
    release_slot: Callable[[], None]
    """The slot hand-back: the run's agent slot is free for the next task."""
    over: Callable[[str], None]
    """The run of this task is over: the runner stops counting it."""
    closing: Callable[[], bool]
    """Whether the runner is shutting down: it then ends or hands back the tasks of the runs it stops."""
    calls: Callable[[LiveTask], AgentCalls] | None = None
    """A run's calls to other agents, for its task (the parent): the replica's `LocalCalls`, a remote
    worker's own; None: its agents get none (`TaskContext.calls`)."""
    checkpoints: Callable[[LiveTask], CheckpointStore] | None = None
    """A run's checkpoint store, bound to its task (`TaskContext.checkpoints`): the database's on a replica
    (`checkpoints.py`), the worker endpoints' in a remote worker; None: runs keep none."""
    holder: str = ""
    """Who runs here, as leases name it (a replica's id, `worker:...`): the status of a run that goes on
    with a task names it."""


class AgentRun:
    """The run of one task's agent, started at once as its own asyncio task."""

    def __init__(self, task_id: str, setup: RunSetup) -> None:
        self.task_id = task_id
        self._setup = setup
        self.ctx: TaskContext | None = None
        """The agent's context, once the run has built it (an answer is delivered there)."""
        self.slot = True
        """The run holds an agent slot: until its task ends (`_ended`), or else until the run is over."""
        self.task = asyncio.create_task(self._run(), name=f"run-{task_id}")

    async def stop(self) -> None:
        """Stop the run: ask the agent to cancel, then cancel its coroutine."""
        grace = self._setup.grace_s + 1
        if self.ctx is not None:
            try:
                async with asyncio.timeout(grace):
                    await self.ctx.cancel()
            except Exception:
                log.exception("cancelling the agent of task %s failed", self.task_id)
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.task), grace)

    def _ended(self) -> None:
        """The run's task has ended: its slot is free for the next task, while the run cleans up."""
        if self.slot:
            self.slot = False
            self._setup.release_slot()

    async def _run(self) -> None:
        task_id, role = self.task_id, self._setup.role
        live = self._setup.tasks.get(task_id)
        # A run is its own unit of work in the logs (not the request that may have started it), and its
        # span continues the trace of the request that created the task, wherever that was served.
        logs.scope(
            task_id=task_id,
            context_id=live.task.context_id if live else None,
            role=role,
            principal=live.owner if live else None,
        )
        attributes = {"a2a.task_id": task_id, "a2a.role": role}
        with traces.span("agent.run", traceparent=live.traceparent if live else None, attributes=attributes):
            await self._run_traced()

    async def _run_traced(self) -> None:
        task_id, tasks = self.task_id, self._setup.tasks
        # One line as a run starts and one as it is over: what an operator follows a replica's or a worker's
        # work by. A pure agent's runs (an echo, a lookup) are as many as the requests: debug only.
        level = logging.DEBUG if self._setup.agent.pure else logging.INFO
        began, live = time.monotonic(), tasks.get(task_id)
        log.log(level, "task %s: run started on %s", task_id, self._setup.holder or "this replica")
        try:
            await self._run_agent()
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
                tasks.outage_grace_s,
            )
            await self._fail_when_back(
                f"The database was unreachable for more than {tasks.outage_grace_s:g} s; the agent "
                "was stopped and its output since then could not be recorded.",
            )
        except Exception:
            # Ending the task failed too: its lease, no longer renewed, lets a reaper end it.
            log.exception("could not record the end of task %s", task_id)
        finally:
            log.log(
                level,
                "task %s: run over after %.1f s, task %s",
                task_id,
                time.monotonic() - began,
                live.task.status.state.value if live is not None else "not held here",
            )
            if not self._setup.closing():
                tasks.forget(task_id)
            self._setup.over(task_id)
            self._ended()

    async def _fail_when_back(self, reason: str) -> None:
        """End the task `failed` as soon as the database takes it (the lease stays renewed meanwhile)."""
        delay = 0.2
        while not self._setup.closing():
            try:
                await self._setup.tasks.fail(self.task_id, reason)
                return
            except TaskLostError:
                log.warning("task %s was ended or taken over by another replica meanwhile", self.task_id)
                return
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("could not record the end of task %s", self.task_id)
                    return
            await asyncio.sleep(delay)
            delay = backoff(delay, cap=2.0)

    async def _run_agent(self) -> None:
        task_id, tasks = self.task_id, self._setup.tasks
        live = tasks.get(task_id)
        if live is None or live.task.status.state.terminal:
            return
        task = live.task
        last_user = max((i for i, m in enumerate(task.history) if m.role is Role.USER), default=None)
        if last_user is None:
            await tasks.fail(task_id, "The task has no user message to work on.")
            return
        message = task.history[last_user]
        history = task.history[:last_user]
        request = request_for(
            live.owner, message, task.context_id, history, task_id, chosen_model(task.metadata)
        )
        rid = response_artifact_id(task_id)
        started = any(a.artifact_id == rid for a in task.artifacts)
        queue: asyncio.Queue[list[Event] | BaseException | None] = asyncio.Queue(maxsize=RUN_BUFFER)
        prices = self._setup.prices
        price = prices.price if prices is not None else None
        self.ctx = ctx = TaskContext(request, task_id, queue.put, response_started=started, price=price)
        calls = RunCalls(self._setup.calls(live), ctx.record_child) if self._setup.calls else None
        ctx.calls = calls
        if self._setup.checkpoints is not None:
            ctx.checkpoints = self._setup.checkpoints(live)
        ctx.resumed = resumed(task)
        if ctx.resumed is not None:
            text = (
                f"{holder_name(self._setup.holder, start=True)} goes on with this task from its checkpoint "
                f"(attempt {ctx.resumed.attempt})."
            )
            await queue.put([status_update(task_id, task.context_id, TaskState.WORKING, text)])
        live.on_end = self._ended
        timeout_s = run_timeout(task.metadata, self._setup.timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                await self._consume(ctx, queue)
        except TimeoutError:
            await _stop(ctx)
            await tasks.fail(
                task_id, f"The agent did not finish within {timeout_s:g} s and was stopped.", wait=True
            )
        if calls is not None:
            await self._close_calls(calls)

    async def _close_calls(self, calls: RunCalls) -> None:
        """The task ended here (not canceled or lost: those stop the run before this): cancel the children
        its run left running, within the cancel grace."""
        try:
            async with asyncio.timeout(self._setup.grace_s + 5):
                await calls.close()
        except Exception:
            log.exception("could not cancel the children task %s left running", self.task_id)

    async def _consume(
        self, ctx: TaskContext, queue: asyncio.Queue[list[Event] | BaseException | None]
    ) -> None:
        """Apply what the agent emits, each batch that has piled up in one commit, until the task ends.

        The agent runs as its own task while the previous batch commits, so a fast agent costs one
        commit per burst rather than one per event. Returning from `run` completes the task; an
        exception fails it with the exception's text.
        """

        task_id, tasks = self.task_id, self._setup.tasks

        async def produce() -> None:
            try:
                await serve(self._setup.agent, ctx)
                if not ctx.finished:
                    await ctx.complete()
                await queue.put(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await queue.put(exc)

        producer = asyncio.create_task(produce(), name=f"agent-{task_id}")
        live = tasks.get(task_id)
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
                        if await tasks.record(task_id, events):
                            return
                    except TaskLostError:
                        lost = True
                        await _stop(ctx)  # at once: no straggler's grace for a task that is not ours
                        raise
                end = items[-1]
                if isinstance(end, BaseException):
                    log.error("agent run for task %s failed", task_id, exc_info=end)
                    await _stop(ctx)
                    await tasks.fail(task_id, f"The agent failed: {type(end).__name__}: {end}", wait=True)
                    return
                if end is None:
                    await tasks.fail(task_id, "The agent stopped without reporting a result.", wait=True)
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


def resumed(task: Task) -> Resumed | None:
    """The resume a run goes on with: the task's last message is the status that handed it on
    (`tasks/resume.py`), so no run has started on it since."""
    last = task.history[-1] if task.history else None
    info = resume_of(last.metadata) if last is not None and last.role is Role.AGENT else None
    if info is None:
        return None
    return Resumed(
        attempt=info["attempt"], previous=info["previous"], reason=info["reason"], pending=unheard(task)
    )


def unheard(task: Task) -> str | None:
    """The user's latest message when it came after the agent last spoke before the hand-on (the task's
    resume markers aside): the previous run may never have had it. Its text, or its data parts as JSON."""
    said = [m for m in task.history if m.role is Role.USER or resume_of(m.metadata) is None]
    if not said or said[-1].role is not Role.USER:
        return None
    last = said[-1]
    if last.text():
        return last.text()
    data = [p.data for p in last.parts if p.kind == "data"]
    return json.dumps(data) if data else None


def request_for(
    owner: str,
    message: Message,
    context_id: str,
    history: list[Message],
    task_id: str | None,
    model: str | None = None,
) -> Request:
    """What the agent is given: the message, its context, the history before it, the extensions asked for,
    the model its task chose."""
    return Request(
        message=message,
        context_id=context_id,
        principal=owner,
        task_id=task_id,
        history=history,
        extensions=tuple(dict.fromkeys(message.requested_extensions + message.extensions)),
        active_extensions=tuple(message.active_extensions),
        model=model,
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
