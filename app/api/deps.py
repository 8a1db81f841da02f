"""What the routers share: the wired-up components (`app.state.components`), and the caller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request

from app.agents.repos.policy import RepoPolicy
from app.limits import Limits
from app.protocol.errors import UnauthenticatedError
from app.protocol.task_options import TaskLimits
from app.tasks.service import TaskService
from app.tasks.workers import WorkerDesk

from .edge.auth import PRINCIPAL_KEY

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.agents.cli.sweep import Sweep
    from app.bus.base import Bus
    from app.push.deliverer import Deliverer
    from app.runner.calls import CallsFactory
    from app.runner.discovery import Discovery
    from app.runner.idle import Idle
    from app.runner.reaper import Reaper
    from app.runner.retention import Retention
    from app.runner.runner import Runner
    from app.store.usage import UsageReads
    from app.store.writer import Writer
    from app.tasks.live import LiveTasks

    from .card.build import Card
    from .edge.metrics import Metrics


@dataclass(slots=True)
class Components:
    """What `app.wiring.wire` built and runs for one role of the app (health checks read the engine, bus,
    runners and deliverer; the routers the rest). The root app's is the default role's; `roles` holds
    every role's, the default one first. The settings the handlers read come as plain values, never the
    `Settings`."""

    public_url: str
    """PUBLIC_URL (or its default): discovery's listing names the cards under it."""
    replica_id: str
    """REPLICA_ID (or its default): this process's name, for health and the metrics."""
    sse_keepalive_s: float
    """SSE_KEEPALIVE_S: the interval of keep-alive comments on idle streams."""
    console_admins: frozenset[str]
    """CONSOLE_ADMINS: the principals who may read every principal's tasks and usage."""
    service: TaskService
    card: Card
    input_modes: tuple[str, ...]
    extended_card: Card | None
    """The authenticated extended card, or None when none is configured."""
    limits: Limits
    engine: AsyncEngine
    bus: Bus
    runner: Runner | Idle
    """The role's runner here, or `Idle` when this process does not run the role (`AGENT_ROLES`)."""
    reaper: Reaper
    """The role's reaper (`runner/reaper.py`), started and stopped by the wiring."""
    deliverer: Deliverer
    tasks: LiveTasks
    writer: Writer
    metrics: Metrics | None = None
    """The app's metrics, for the bindings that count their own calls (gRPC); None: turned off."""
    role: str = "default"
    roles: dict[str, Components] = field(default_factory=dict)
    """Every role's components by name (shared by all of them), the default role first."""
    workers: WorkerDesk | None = None
    """What the role's remote workers call (`/workers/v1/...`)."""
    discovery: Discovery | None = None
    """This process's instances (one per role it runs) and the live listing of all (`GET /agents`), shared by
    every role's components; None: no discovery (the listing is empty)."""
    usage: UsageReads | None = None
    """The sums of what agent runs used (`GET /usage`), shared by every role's components."""
    retention: Retention | None = None
    """The retention pass (old tasks deleted, waiting ones expired), shared; its counts for the metrics."""
    sweep: Sweep | None = None
    """This process's workspace sweep, shared; its sizes and counts for the metrics."""
    repos: RepoPolicy | None = None
    """What repository and files a message may bring (a coding-agent CLI's role); None: the role's agent
    works on no repository, and a message naming one is refused."""
    force: bool | None = None
    """The role's approval mode (its `force`, else AGENT_FORCE) for a coding-agent CLI: a task may ask a
    stricter one (`metadata.force: false`), never a looser; None: the role's agent has none."""
    calls: CallsFactory | None = None
    """The calls of agents to agents (`for_parent`), shared by every role's components: a replica's runs
    get theirs from it, and so does a remote worker's run through the worker endpoint."""
    task_limits: TaskLimits = field(default_factory=TaskLimits)
    """What a task of the role may choose (`metadata.model`, `metadata.timeoutS`): its models, its timeout."""
    skills: tuple[str, ...] = ()
    """The ids of the skills the role's public card declares: what a send's `metadata.skill` may name."""
    at_root: bool = False
    """Whether these are the root endpoints' components (the default role's, with the root card): a send
    there is routed by its skill, and a task id finds the task on whichever role it is (`ops/routing.py`)."""
    task_role: Callable[[str, str], Awaitable[str | None]] | None = None
    """The role of an owner's task (`store.tree`), given by the wiring with several roles; None: one role."""
    waiting_roles: Callable[[str, str], Awaitable[list[str]]] | None = None
    """The roles of an owner's tasks waiting for input in a context (`store.tree`), given by the wiring with
    several roles; None: one role."""
    day_budget_usd: float | None = None
    """BUDGET_DAY_USD: what one principal may spend in a UTC day (read from `usage`); None: no cap."""

    @property
    def running(self) -> int:
        """Agent runs in progress in this process, all roles."""
        return sum(c.runner.running for c in self.roles.values()) if self.roles else self.runner.running

    @property
    def slots(self) -> int:
        """Agent runs allowed at once in this process, all roles."""
        return sum(c.runner.slots for c in self.roles.values()) if self.roles else self.runner.slots


def components(request: Request) -> Components:
    return request.app.state.components


def owner_of(request: Request) -> str:
    """The authenticated principal's name: the owner of every row the call may see or create.

    Fails closed: a request that did not pass the guard has no owner and gets a 401.
    """
    principal = request.scope.get(PRINCIPAL_KEY)
    if principal is None:
        raise UnauthenticatedError()
    return principal.name
