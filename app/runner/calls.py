"""The calls of a run on a replica (`LocalCalls`): its agent starts, reads, answers and cancels tasks on the
deployment's roles through their `TaskService`s, as the principal of its own task (the parent).

`CallsFactory` (built once by the wiring, in `Components.calls`) makes one per parent task: for a run here
(`RunSetup.calls`), and for a remote worker's run, whose parent the worker holds (the worker endpoint).

The tree's rules hold here: a child is a new task in a context of its own, its first message referring to
the parent (`referenceTaskIds`) and carrying the tree's metadata (`parentTaskId`, `callDepth`, `callPath`),
which its task keeps; a child deeper than AGENT_CALL_DEPTH, or on a role already on the path, is refused. A
run reaches only its own children: any other task id, whether it exists or not, is the same refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.agents.calls import AgentInfo, CallError, ChildTask, child_task
from app.protocol.budget import BUDGET_KEY, left as budget_left
from app.protocol.errors import A2AError, TaskNotCancelableError, TaskNotFoundError
from app.protocol.model import (
    DEPTH_KEY,
    PARENT_KEY,
    PATH_KEY,
    Message,
    Part,
    Role,
    SendConfig,
    new_id,
)

if TYPE_CHECKING:
    from app.limits import Limits
    from app.store.instances import InstanceRecord
    from app.store.tree import Tree
    from app.tasks.service import TaskService

NOT_MINE = "not a task this run started: a run reads, answers and cancels only the tasks it started"
"""The refusal of any task id that is not a child of the run's task, whether such a task exists or not."""


class CallsFactory:
    """What every run's calls share: each role's task service, the roles as `list_agents` shows them, the
    live instances, the tree's reads and the limits (AGENT_CALL_DEPTH, AGENT_CALL_WAIT_S, and
    WORKER_CALL_HOLD_S: the longest one call of a remote worker's run is held)."""

    def __init__(
        self,
        services: Callable[[str], TaskService | None],
        agents: Mapping[str, AgentInfo],
        live: Callable[[], Awaitable[Sequence[InstanceRecord]]],
        tree: Tree,
        *,
        depth_limit: int,
        wait_s: float,
        hold_s: float = 25.0,
        limits: Callable[[str], Limits | None] = lambda _role: None,
        day_budget: Callable[[str], Awaitable[None]] | None = None,
        admit: Callable[[str, Message], None] = lambda _role, _message: None,
    ) -> None:
        """`services(role)`: the role's task service (None: no such role); `agents`: every role a call may
        reach, in the order `GET /agents` lists them, as its card describes it; `live()`: the instances
        live now (discovery); `limits(role)`: the role's limits, which a child's message meets as a client's
        does (parts, text, the principal's task rate): an agent in a loop cannot start tasks faster than
        its principal may; `day_budget(owner)`: raises while the principal's day is spent (BUDGET_DAY_USD),
        which a child's creation meets too; `admit(role, message)`: raises A2AError for a child's message
        the role would refuse from a client (the media types it takes, its files' names, sizes and URLs)."""
        self.services = services
        self.agents = agents
        self.live = live
        self.tree = tree
        self.depth_limit = depth_limit
        self.wait_s = wait_s
        self.hold_s = hold_s
        self.limits = limits
        self.day_budget = day_budget
        self.admit = admit

    def for_parent(
        self, owner: str, task_id: str, role: str, metadata: Mapping[str, Any] | None
    ) -> LocalCalls:
        """The calls of a run of `task_id` (of `owner`, on `role`, its metadata giving its place in the
        tree)."""
        return LocalCalls(self, owner, task_id, role, metadata)


class LocalCalls:
    """`AgentCalls` for one parent task, through the roles' task services (module docstring)."""

    def __init__(
        self, f: CallsFactory, owner: str, task_id: str, role: str, metadata: Mapping[str, Any] | None
    ) -> None:
        self._f = f
        self.owner = owner
        self.task_id = task_id
        tree = metadata or {}
        depth = tree.get(DEPTH_KEY)
        self.depth = depth if isinstance(depth, int) and not isinstance(depth, bool) else 0
        path = tree.get(PATH_KEY)
        self.path = [r for r in path if isinstance(r, str)] if isinstance(path, list) and path else [role]
        """The roles from the tree's root down to this task (a client's task: its role alone)."""

    async def list_agents(self) -> Sequence[AgentInfo]:
        live = {i.role for i in await self._f.live()}
        return [replace(info, available=role in live) for role, info in self._f.agents.items()]

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask:
        service = self._f.services(role) if role in self._f.agents else None
        if service is None:
            raise CallError(f"There is no role {role!r}; the roles are: {', '.join(self._f.agents)}")
        depth = self.depth + 1
        if depth > self._f.depth_limit:
            raise CallError(
                f"A task started by this run would be {depth} calls deep; AGENT_CALL_DEPTH allows "
                f"{self._f.depth_limit}. Do the work here, or answer with what you have"
            )
        if role in self.path:
            raise CallError(
                f"Role {role!r} is already on this task's path ({' -> '.join(self.path)}): a call to it "
                "would loop back"
            )
        parts = ([Part(text=text)] if text else []) + list(files)
        if not parts:
            raise CallError("A task needs a message: give it text or files")
        await self._within_limits(role, parts)
        tree: dict[str, Any] = {PARENT_KEY: self.task_id, DEPTH_KEY: depth, PATH_KEY: [*self.path, role]}
        share = await self._budget_left()
        if share is not None:
            tree[BUDGET_KEY] = share
        message = Message(
            message_id=new_id(),
            role=Role.USER,
            parts=parts,
            reference_task_ids=[self.task_id],
            metadata=tree,
        )
        try:
            self._f.admit(role, message)
            made = await service.send(self.owner, message, SendConfig(blocking=False))
        except A2AError as exc:
            raise CallError(f"Role {role!r} did not take the task: {exc.message}") from None
        if isinstance(made, Message):  # the agent answered at once, with no task
            return ChildTask("", made.context_id or "", role, "completed", made.text())
        if wait:
            made = await service.wait(self.owner, made.id, self._f.wait_s)
        return child_task(made, role)

    async def get_task(self, task_id: str) -> ChildTask:
        role, service = await self._mine(task_id)
        try:
            return child_task(await service.get(self.owner, task_id), role)
        except TaskNotFoundError:  # deleted meanwhile (retention)
            raise CallError(f"Task {task_id!r} is {NOT_MINE}") from None

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask:
        role, service = await self._mine(task_id)
        if not text:
            raise CallError("An answer needs text")
        message = Message(message_id=new_id(), role=Role.USER, parts=[Part(text=text)], task_id=task_id)
        try:
            await service.send(self.owner, message, SendConfig(blocking=False))
        except A2AError as exc:
            raise CallError(f"Task {task_id} did not take the answer: {exc.message}") from None
        if wait:
            return child_task(await service.wait(self.owner, task_id, self._f.wait_s), role)
        return child_task(await service.get(self.owner, task_id), role)

    async def cancel_task(self, task_id: str) -> ChildTask:
        """Cancel the child (its own children after it); one that has ended already comes back as it is."""
        role, service = await self._mine(task_id)
        try:
            task = await service.cancel(
                self.owner, task_id, reason=f"Canceled by its parent task {self.task_id}"
            )
        except TaskNotCancelableError:
            task = await service.get(self.owner, task_id)
        except A2AError as exc:
            raise CallError(f"Task {task_id} could not be canceled: {exc.message}") from None
        return child_task(task, role)

    async def _within_limits(self, role: str, parts: Sequence[Part]) -> None:
        """The checks a client's new task on `role` meets: the principal's day (BUDGET_DAY_USD), its parts,
        its text, the principal's task rate."""
        if self._f.day_budget is not None:
            try:
                await self._f.day_budget(self.owner)
            except A2AError as exc:
                raise CallError(f"Role {role!r} did not take the task: {exc.message}") from None
        limits = self._f.limits(role)
        if limits is None:
            return
        if len(parts) > limits.max_parts:
            raise CallError(f"A message may have at most {limits.max_parts} parts; this one has {len(parts)}")
        text = sum(len(p.text) for p in parts if p.text)
        if text > limits.max_text:
            raise CallError(
                f"A message may carry at most {limits.max_text} characters of text; this one has {text}"
            )
        try:
            await limits.rate.take(self.owner)
        except A2AError as exc:
            raise CallError(f"Role {role!r} did not take the task: {exc.message}") from None

    async def _budget_left(self) -> float | None:
        """What the parent may still spend (None: it has no budget), the most its new child may: a child's
        spend counts against its parent's once it rolls up (`RunCalls`). CallError when none is left."""
        service = self._f.services(self.path[-1])
        if service is None:
            return None
        try:
            parent = await service.get(self.owner, self.task_id, history_length=0)
        except TaskNotFoundError:
            return None
        share = budget_left(parent.metadata)
        if share is not None and share <= 0:
            raise CallError("This task's budget is spent: it cannot start another task")
        return share

    async def _mine(self, task_id: str) -> tuple[str, TaskService]:
        """The child's role and its service; CallError for any task that is not a child of this run's."""
        node = await self._f.tree.node(self.owner, task_id) if task_id else None
        service = self._f.services(node.role) if node is not None else None
        if node is None or node.parent_task_id != self.task_id or service is None:
            raise CallError(f"Task {task_id!r} is {NOT_MINE}")
        return node.role, service
