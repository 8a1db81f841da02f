"""The task service: send, stream, get, list, cancel and resubscribe, for the edge.

It holds its parts and delegates: `live.LiveTasks` changes tasks (every write goes through its `apply`),
`follow.Reader` reads and follows them, `push_configs.PushConfigCalls` serves the webhook calls,
`control.Control` forwards writes to the replica holding a task, and the `Executor` (the runner) runs
agents. A send finds an earlier copy of itself first (`copies`), then stores a new task or a follow-up.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from app import ssrf
from app.protocol.errors import (
    ContextBusyError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnavailableError,
    UnsupportedOperationError,
)
from app.protocol.events import EventRecord, status_update
from app.protocol.model import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Message,
    PushConfig,
    SendConfig,
    StateTransition,
    Task,
    TaskState,
    TaskStatus,
    iso,
    new_id,
    tree_of,
    utcnow,
)
from app.protocol.task_options import kept_options
from app.push.configs import PushConfigs
from app.store.idempotency import IdemKey, IdempotencyKeys
from app.store.repo import InvalidPageToken, TaskPage
from app.store.writer import ConflictError, ContextTakenError, DuplicateError, SeqTakenError
from app.telemetry import logs

from .control import Control, UnreachableHolderError
from .copies import Copies, IdempotencyKeyReusedError, in_history, retry_key
from .executor import Executor
from .follow import Reader
from .held import HeldElsewhereError, LiveTask
from .live import LiveTasks
from .push_configs import PushConfigCalls
from .step import STOP_STATES, NewTask, Snapshot

log = logging.getLogger(__name__)

__all__ = ["Executor", "IdempotencyKeyReusedError", "Snapshot", "TaskService"]

RUNNING_STATES = frozenset({TaskState.SUBMITTED, TaskState.WORKING})
"""While its task is in one of these, a copy of a message the task has taken is a retry: it attaches."""
MAX_ROUNDS = 16
STAGED_S = 0.05
"""How long a staged task (`_accept`) waits for its run's first step before its creation commits alone."""
CANCEL_RACES = 3
"""How many times a cancel is decided again when another writer's commit collides with its own."""
CANCELED_BY_CLIENT = "Task canceled by the client"
WAITING_LISTED = 10
"""How many of a context's waiting tasks a message naming only the context is told of."""
"""The status message of a task canceled through the API."""


@dataclass(slots=True)
class _Send:
    """One try at storing a send: `_submit` makes one per round (its retry key may change between them);
    `stage`: the send is blocking, so a new task for a `pure` agent may be staged (`_accept`)."""

    owner: str
    message: Message
    push: PushConfig | None
    idem: IdemKey | None
    retry: str | None
    stage: bool
    named: str | None = None
    """The id a legacy `tasks/send` gave its task (`SendConfig.task_id`)."""


class _AlreadyApplied(Exception):
    """The follow-up is a retry of one the running task has taken: it is not applied again."""


class TaskService:
    def __init__(
        self,
        tasks: LiveTasks,
        executor: Executor,
        *,
        blocking_timeout_s: float,
        push_configs: PushConfigs | None = None,
        push_policy: ssrf.Policy | None = None,
        max_history: int | None = None,
        keys: IdempotencyKeys | None = None,
        stream_until: str = "interrupted",
        cascade: Callable[[str, str], Awaitable[None]] | None = None,
    ):
        """It reads, writes and forwards through the repository, writer, bus and leases of its `tasks` (whose
        role is its role). `stream_until` (`SEND_STREAM_UNTIL`): where a send's stream ends, at the first
        `interrupted` state (input-required, auth-required) or a terminal one, or only at a `terminal`
        one; a subscriber's stream always follows the task to its end. `cascade(owner, task_id)`: cancels
        the children a canceled task's runs started (on any role, through their own `cancel`)."""
        self._tasks = tasks
        self._cascade = cascade
        self._executor = executor
        self.blocking_timeout_s = blocking_timeout_s
        self._stream_stop = STOP_STATES if stream_until == "interrupted" else TERMINAL_STATES
        self._copies = Copies(keys, tasks.parts.repo, tasks.parts.writer)
        self._reader = Reader(tasks, max_history)
        self._control = Control(tasks, self.cancel, self._continue, executor.lost)
        self._push = PushConfigCalls(push_configs, push_policy or ssrf.Policy(), self._reader, self._control)
        self.head = self._reader.head
        self.set_push_config = self._push.set
        self.get_push_config = self._push.get
        self.list_push_configs = self._push.list
        self.delete_push_config = self._push.delete

    # ---- reads -------------------------------------------------------------------------------

    async def get(self, owner: str, task_id: str, history_length: int | None = None) -> Task:
        """The task with its last `history_length` messages (None: as many as the server returns)."""
        logs.bind(task_id=task_id)
        return (await self._reader.load(owner, task_id, history_length)).task

    async def list(
        self,
        owner: str,
        *,
        context_id: str | None = None,
        state: TaskState | None = None,
        after: str | None = None,
        page_size: int = 50,
        page_token: str | None = None,
        include_artifacts: bool = False,
        history_length: int | None = None,
    ) -> TaskPage:
        """The caller's own tasks, newest status first, a page at a time."""
        try:
            return await self._tasks.parts.repo.list_tasks(
                owner,
                context_id=context_id,
                state=state,
                after=after,
                page_size=page_size,
                page_token=page_token,
                artifacts=include_artifacts,
                history=self._reader.limit(history_length),
            )
        except InvalidPageToken:
            raise InvalidParamsError("pageToken is not one this server issued") from None

    async def wait(self, owner: str, task_id: str, timeout_s: float) -> Task:
        """The caller's task once it is terminal or waiting for input, or as it stands after `timeout_s`."""
        return self._reader.clip(await self._reader.wait_stopped(owner, task_id, timeout_s))

    async def opening(self, owner: str, context_id: str | None, task_id: str | None = None) -> Message | None:
        """The message that opened the caller's context (of `task_id` when no `context_id` is given), for the
        checks of a later message; None for a new context (or an unknown task: the send refuses it)."""
        if not context_id and task_id:
            try:
                context_id = (await self._reader.head(owner, task_id)).context_id
            except TaskNotFoundError:
                return None
        if not context_id:
            return None
        return await self._tasks.parts.repo.first_message(owner, context_id)

    # ---- send and stream -----------------------------------------------------------------------

    async def send(
        self,
        owner: str,
        message: Message,
        config: SendConfig,
        push: PushConfig | None = None,
        key: str | None = None,
    ) -> Task | Message:
        """`message/send`: the agent's direct Message, or the task at a terminal or interrupted state
        (at once if non-blocking). A retry (see `_submit`) gets what its first copy made, as it stands;
        `key` is the request's Idempotency-Key."""
        made = await self._submit(owner, message, config, push, key, stage=config.blocking)
        if isinstance(made, Message):
            return made
        if isinstance(made, LiveTask):
            stopped = await self._reader.wait_stopped(owner, made.task.id, self.blocking_timeout_s, made)
            return self._reader.clip(stopped)
        if not config.blocking:
            return (await self._reader.load(owner, made)).task
        return self._reader.clip(await self._reader.wait_stopped(owner, made, self.blocking_timeout_s))

    async def stream(
        self,
        owner: str,
        message: Message,
        push: PushConfig | None = None,
        config: SendConfig | None = None,
        key: str | None = None,
    ) -> AsyncIterator[Snapshot | EventRecord | Message]:
        """`message/stream`: validates and stores first (errors raise here), then yields events until the
        turn ends (`stream_until`: by default at a terminal state or a question, where the client answers
        with a new send); a direct reply from the agent is the only item. A retry follows the task its
        first copy made."""
        made = await self._submit(owner, message, config or SendConfig(), push, key)
        if isinstance(made, Message):
            return _single(made)
        return self._reader.follow(owner, made, stop_at=self._stream_stop)

    async def resubscribe(
        self, owner: str, task_id: str, after: int | None = None
    ) -> AsyncIterator[Snapshot | EventRecord]:
        """Follow the task (an unknown task raises here, before the stream starts)."""
        logs.bind(task_id=task_id)
        await self._reader.head(owner, task_id)
        return self._reader.follow(owner, task_id, after=after)

    async def _submit(
        self,
        owner: str,
        message: Message,
        config: SendConfig,
        push: PushConfig | None,
        key: str | None,
        stage: bool = False,
    ) -> str | Message | LiveTask:
        """Store a send (a new task, a follow-up), or find what an earlier copy of it made: the task's id,
        or the agent's direct reply. With `stage` (a blocking send) a new task for a `pure` agent comes
        back as its live task, committed with its run's first step (`_accept`).

        An earlier copy is the same Idempotency-Key with the same request, or the same first message (id,
        parts, taskId/contextId as sent) while the task it started still runs; any other reuse of a
        messageId is a new message. Of concurrent copies the database stores one; the others find it.
        """
        idem = self._copies.key(key, message, config, push)
        retry = None if message.task_id else retry_key(message, self._tasks.parts.role)
        sent = (message.task_id, message.context_id)
        # A running copy of a new message is found by the conflict of its retry key, so the common send
        # (no copy) costs no look-up. Each conflict is another copy that stored first; it repeats only while
        # copies keep finishing between our conflict and our look-up (each then a new message).
        # After MAX_ROUNDS of those, every copy we met had finished by our look-up: this one is stored as a
        # new message without a retry key, so it cannot conflict again (only its Idempotency-Key can, and
        # then `Copies.earlier` finds the copy that stored it).
        running_copy: str | None = None
        rounds = 0
        while rounds < 2 * MAX_ROUNDS:
            message.task_id, message.context_id = sent
            try:
                earlier = await self._copies.earlier(owner, idem, running_copy)
                if earlier is not None:
                    return earlier
                named = config.task_id
                return await self._store(_Send(owner, message, push, idem, retry, stage and not named, named))
            except UnsupportedOperationError:
                # A keyed copy applied (and its key stored) between our look-up and our turn at the task.
                if idem is None or (earlier := await self._copies.earlier(owner, idem, None)) is None:
                    raise
                return earlier
            except DuplicateError:
                rounds += 1
                running_copy = retry
                if rounds >= MAX_ROUNDS:
                    retry = running_copy = None
        raise InternalError("Concurrent copies of this request kept conflicting; send it again")

    async def _store(self, s: _Send) -> str | Message | LiveTask:
        """The checks every send makes before anything is stored (the webhook even when the agent then
        answers directly and it has nothing to be told), then the follow-up, the agent's direct reply to
        a new message, or the new task. A contextId needs no check: contexts are per principal, so an id
        another principal also uses names this caller's own context (their tasks are never in it)."""
        if s.push is not None:
            await self._push.check_url(s.push.url)
        if s.named and not s.message.task_id:
            s.message.task_id = await self._named(s.owner, s.named)
        elif s.message.context_id and not s.message.task_id:
            s.message.task_id = await self._waiting(s.owner, s.message.context_id)
        if s.message.task_id:
            if s.push is not None:
                await self._push.set(s.owner, s.message.task_id, s.push)
            return await self._continue(s.owner, s.message, idem=s.idem)
        s.message.context_id = s.message.context_id or new_id()
        direct = await self._executor.reply(s.owner, s.message)
        if direct is not None:
            await self._copies.remember(s.owner, s.idem, reply=direct)
            return direct
        try:
            return await self._accept(s)
        except ConflictError as exc:
            if s.named is None or type(exc) is not ConflictError:
                raise
            # Another request took the id between our look-up and our commit: decided again.
            s.message.task_id = await self._named(s.owner, s.named)
            return await self._continue(s.owner, s.message, idem=s.idem)

    async def _named(self, owner: str, task_id: str) -> str | None:
        """A legacy `tasks/send`'s task id: the caller's task of that id, which the message continues, or
        None for a new task named by it; an id another task has is refused (-32602)."""
        try:
            await self._reader.head(owner, task_id)
            return task_id
        except TaskNotFoundError:
            pass
        if await self._tasks.parts.repo.task_taken(task_id):
            raise InvalidParamsError(
                f"Task id {task_id} is taken; leave id out (the server names the task) or choose another",
                {"taskId": task_id},
            )
        return None

    async def _waiting(self, owner: str, context_id: str) -> str | None:
        """The task a message naming only its context answers: the one task of the caller's context that
        waits for input; None when none does (a new task); several are -32602, listing them."""
        waiting = await self._tasks.parts.repo.waiting_in_context(owner, context_id, WAITING_LISTED + 1)
        if len(waiting) > 1:
            listed = ", ".join(waiting[:WAITING_LISTED]) + (", ..." if len(waiting) > WAITING_LISTED else "")
            raise InvalidParamsError(
                f"Context {context_id} has several tasks waiting for input ({listed}); name the one this "
                "message answers in message.taskId",
                {"contextId": context_id, "taskIds": ",".join(waiting[:WAITING_LISTED])},
            )
        return waiting[0] if waiting else None

    async def _accept(self, s: _Send) -> str | LiveTask:
        """Store the message as a new task and start the agent; returns the task's id.

        A webhook given with the message (already checked) is stored with the task, and so are the
        message's retry key and the Idempotency-Key: DuplicateError when a concurrent copy stored them first.

        With `stage`, a task whose run starts here for a `pure` agent (no effects beyond its events) is
        staged instead: its run starts at once and the creation commits with the run's first step (for an
        agent that answers at once, the whole task in one transaction); returns the live task.
        """
        message = s.message
        task_id = s.named or new_id()
        context_id = message.context_id or new_id()
        message.task_id = task_id
        message.context_id = context_id
        logs.bind(task_id=task_id, context_id=context_id)
        now = utcnow()
        here = self._executor.reserve()
        status = TaskStatus(TaskState.SUBMITTED, iso(now))
        task = Task(
            id=task_id,
            context_id=context_id,
            status=status,
            history=[message],
            metadata={**(tree_of(message.metadata) or {}), **kept_options(message.metadata)} or None,
            transitions=[StateTransition(TaskState.SUBMITTED, status.timestamp)],
        )
        new = NewTask(task, s.owner, s.retry, s.push, self._copies.row(s.owner, s.idem, task_id))
        if here and s.stage and self._executor.pure:
            live = self._tasks.stage(new)
            self._executor.start(task_id, reserved=True)
            try:
                await self._tasks.born(live, STAGED_S)
            except Exception:
                await self._executor.stop(task_id)
                raise
            return live
        try:
            await self._create(new, now, here, s.retry)
        except BaseException:
            if here:
                self._executor.release_slot()
            raise
        if here:
            self._executor.start(task_id, reserved=True)
        else:
            await self._tasks.parts.bus.ring_queue()
        return task_id

    async def _create(self, new: NewTask, now: datetime, here: bool, retry: str | None) -> None:
        """`LiveTasks.create`, refused while another task of an agent with effects is open in the context
        (`ContextBusyError`); a copy of this very message running there is a DuplicateError (`_submit`
        finds it)."""
        for _ in range(MAX_ROUNDS):
            try:
                await self._tasks.create(new, now, here)
                return
            except ContextTakenError:
                context_id = new.task.context_id
                open_task = await self._tasks.parts.repo.open_in_context(new.owner, context_id)
                if open_task is None:
                    continue  # it ended between our commit and our look-up
                open_id, state, open_retry = open_task
                if retry is not None and open_retry == retry:
                    raise DuplicateError(f"a copy of this message started task {open_id}") from None
                raise ContextBusyError(
                    f"Task {open_id} of context {context_id} is still {state}: this agent runs one task "
                    "per context at a time. Continue that task (message.taskId), wait for it to end, or "
                    "cancel it",
                    {"contextId": context_id, "taskId": open_id, "state": state},
                ) from None
        raise InternalError("The context's open task kept changing; send it again")

    async def _continue(
        self, owner: str, message: Message, hops: int = 0, idem: IdemKey | None = None
    ) -> str:
        """A follow-up to an existing task: only a task waiting for input takes one. A copy of one it has
        taken (same messageId and parts) while it runs is a retry: it attaches, nothing is applied again."""
        assert message.task_id is not None
        logs.bind(task_id=message.task_id)
        try:
            live = await self._tasks.writable(owner, message.task_id)
        except HeldElsewhereError as held:
            if hops:
                raise InternalError() from None
            await self._control.forward_answer(held.replica_id, owner, message, idem)
            return message.task_id
        task = live.task
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"contextId {message.context_id} does not match task {task.id}'s context {task.context_id}",
                {"taskId": task.id},
            )
        message.context_id = task.context_id

        def admit(task: Task) -> None:
            state = task.status.state
            if state in RUNNING_STATES and in_history(task, message):
                raise _AlreadyApplied
            if state.terminal:
                raise UnsupportedOperationError(
                    f"Task {task.id} is {state.value}; a finished task takes no more messages",
                    {"taskId": task.id},
                )
            if state not in INTERRUPTED_STATES:
                raise UnsupportedOperationError(
                    f"Task {task.id} is {state.value}; only a task waiting for input takes a follow-up",
                    {"taskId": task.id},
                )

        working = status_update(task.id, task.context_id, TaskState.WORKING)
        key_row = self._copies.row(owner, idem, task.id)
        try:
            records = await self._tasks.apply(live, [working], [message], admit, key_row)
        except _AlreadyApplied:
            await self._copies.remember(owner, idem, task_id=task.id)
            return task.id
        except SeqTakenError:
            # Another replica took the task over and wrote it: nothing was carried out here, and the next
            # try finds the task where it now stands.
            raise UnavailableError(
                f"Task {task.id} was taken over by another replica while it was answered; send it again"
            ) from None
        if not records:
            raise UnsupportedOperationError(
                f"Task {task.id} has finished; it takes no more messages", {"taskId": task.id}
            )
        if live.holder is None:  # a remote worker's run hears of the answer from its sync instead
            await self._executor.answer(task.id, message)
        return task.id

    # ---- cancel ------------------------------------------------------------------------------

    async def cancel(
        self,
        owner: str,
        task_id: str,
        hops: int = 0,
        reason: str | None = None,
        take_over: bool = False,
        take_over_unheard: bool = True,
    ) -> Task:
        """Cancel the task with `reason` as its status message (default: by the client), where it is
        written: here, or forwarded to the replica holding it; the children its runs started that still
        run are canceled after it (`cascade`). With `take_over` (the admin command line,
        or a holder that did not answer, unless `take_over_unheard` is False) its lease is taken even from
        a live holder, which stops its run at its next commit or heartbeat (`LiveTasks.writable`).

        Another writer may commit the task's next event between this replica's read and its write (the
        holder it took the lease from, a reaper, the holder's next life ending what it left): the cancel is
        then decided again on the task as it now stands, a few times at most."""
        logs.bind(task_id=task_id)
        for _ in range(CANCEL_RACES):
            try:
                return await self._cancel(owner, task_id, hops, reason, take_over, take_over_unheard)
            except SeqTakenError:
                log.info("task %s was written elsewhere while it was canceled here; deciding again", task_id)
        raise UnavailableError(f"Task {task_id} kept changing while it was canceled; send the cancel again")

    async def _cancel(
        self,
        owner: str,
        task_id: str,
        hops: int,
        reason: str | None,
        take_over: bool,
        take_over_unheard: bool,
    ) -> Task:
        try:
            live = await self._tasks.writable(owner, task_id, take_over=take_over)
        except HeldElsewhereError as held:
            if hops:
                raise InternalError() from None
            body = {"op": "cancel", "owner": owner, "task": task_id}
            if reason is not None:
                body["reason"] = reason
            try:
                await self._control.forward(held.replica_id, body)
            except UnreachableHolderError:
                if not take_over_unheard:
                    raise
                # Killed, cut off, or Redis restarting: a cancel needs nothing of the holder, so it is
                # written here over its lease instead of failing (an answer does need its run: it stays 503).
                log.warning("replica %s did not answer; task %s canceled here", held.replica_id, task_id)
                return await self.cancel(owner, task_id, 1, reason, take_over=True)
            return (await self._reader.load(owner, task_id)).task
        event = status_update(task_id, live.task.context_id, TaskState.CANCELED, reason or CANCELED_BY_CLIENT)
        if live.task.status.state.terminal or not await self._tasks.apply(live, [event]):
            state = live.task.status.state
            raise TaskNotCancelableError(
                f"Task {task_id} is already {state.value} and cannot be canceled", {"taskId": task_id}
            )
        await self._executor.stop(task_id)
        if self._cascade is not None:
            await self._cascade(owner, task_id)
        return live.snapshot().task


async def _single(message: Message) -> AsyncIterator[Message]:
    yield message
