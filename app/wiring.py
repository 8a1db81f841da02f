"""Wiring, the app's assembly: `wire` builds the engines, bus, writer, push deliverer, discovery and retention
once, and per role its parts (`role_parts`), its live tasks, runner (or `Idle`, for a role this process does
not run) and task service (`role_stack`), its reaper, limits and worker desk, each given what it uses; then
the gRPC server on them (when GRPC_PORT is set). It tears them down in the reverse order (an
`AsyncExitStack`, so teardown mirrors setup). `main.lifespan` runs them for the FastAPI app.

The admin command line (`cli/admin.py`) builds one role's stack with `role_parts` and `role_stack` too,
under its own name, and the remote worker its agent with `roles.role_agent` and `price_table`: nothing
outside `app/cli/` and this module assembles roles or stores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app import limits, roles as roles_
from app.agents.calls import AgentCalls, AgentInfo
from app.agents.checkpoints import CheckpointStore
from app.agents.cli.sweep import Contexts, Sweep
from app.agents.repos.cache import RepoCache
from app.agents.repos.errors import RepoError
from app.agents.sdk import Agent
from app.agents.workspace import approval_mode, repo_policy
from app.api.bindings import grpc_server, grpc_v03, grpc_v10
from app.api.card.build import Card, build_card
from app.api.card.options import CardOptions
from app.api.deps import Components
from app.api.edge.auth import Authenticator
from app.api.edge.metrics import Metrics
from app.api.ops.calls import check_parts
from app.api.paths import CARD_PATH
from app.bus.base import Bus
from app.bus.memory import MemoryBus
from app.bus.redis import RedisBus
from app.protocol.budget import check_day
from app.protocol.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from app.protocol.model import Message, utcnow
from app.protocol.task_options import TaskLimits
from app.push.configs import PushConfigs
from app.push.deliverer import POOL as DELIVERER_POOL, Deliverer, options_from, policy_from
from app.roles import Role
from app.runner.calls import CallsFactory
from app.runner.checkpoints import TaskCheckpoints
from app.runner.discovery import Discovery, Instance
from app.runner.idle import Idle
from app.runner.prices import PriceTable, PriceTableError
from app.runner.reaper import Reaper
from app.runner.retention import Retention
from app.runner.runner import Runner
from app.settings import SettingError, Settings
from app.store.checkpoints import Checkpoints
from app.store.db import create_engine
from app.store.idempotency import IdempotencyKeys
from app.store.instances import InstanceRecord, Instances
from app.store.leases import Leases
from app.store.repo import Repository
from app.store.retention import Pruning
from app.store.run_checkpoints import RunCheckpoints
from app.store.tree import Tree
from app.store.usage import UsageReads
from app.store.writer import Writer
from app.tasks.executor import Executor
from app.tasks.held import LiveTask
from app.tasks.live import LiveTasks
from app.tasks.losses import Losses
from app.tasks.parts import RoleParts
from app.tasks.service import TaskService
from app.tasks.workers import Announcer, WorkerDesk

__all__ = [
    "Components",
    "price_table",
    "role_parts",
    "role_stack",
    "start_bus",
    "start_writer",
    "wire",
]

log = logging.getLogger(__name__)


def price_table(settings: Settings) -> PriceTable:
    """The price table: the built-in one with PRICE_TABLE_FILE over it (SettingError, one line, if bad)."""
    try:
        return PriceTable.load(settings.price_table_file)
    except PriceTableError as exc:
        raise SettingError("PRICE_TABLE_FILE", str(exc)) from None


def role_parts(
    settings: Settings,
    engine: AsyncEngine,
    writer: Writer,
    bus: Bus,
    name: str,
    *,
    several: bool,
    runs_once: bool = True,
) -> RoleParts:
    """The role's parts in this process, under the bus's name (a replica's, or the admin command line's):
    with `several` roles its repository and leases see only its tasks. `runs_once`: the role's agent has
    effects (`Leases`)."""
    scope = name if several else None
    leases = Leases(engine, bus.replica_id, settings.lease_ttl_s, scope, runs_once=runs_once)
    checkpoints = RunCheckpoints(engine, int(settings.checkpoint_max_mb * 1024 * 1024))
    return RoleParts(
        Repository(engine, scope),
        writer,
        bus,
        leases,
        scope,
        name,
        checkpoints=checkpoints,
        resume_attempts=settings.resume_attempts,
    )


E = TypeVar("E", bound=Executor)


def role_stack(
    parts: RoleParts,
    executor: Callable[[LiveTasks], E],
    settings: Settings,
    engine: AsyncEngine,
    *,
    push_ring: Callable[[], None] | None = None,
    exclusive: bool = False,
    cascade: Callable[[str, str], Awaitable[None]] | None = None,
    budget_usd: float | None = None,
) -> tuple[LiveTasks, E, TaskService]:
    """The role's live tasks on its parts, its executor made on them (a `Runner`, `Idle`, or the admin
    command line's bystander), and its task service over both, as the settings say. `push_ring` wakes the
    local push deliverer; `exclusive`: the role's agent has effects (`LiveTasks`); `cascade`: cancels a
    canceled task's children (`TaskService`); `budget_usd`: the role's cap on a task's spend."""
    tasks = LiveTasks(parts, settings.db_outage_grace_s, push_ring, exclusive)
    run = executor(tasks)
    service = TaskService(
        tasks,
        run,
        blocking_timeout_s=settings.blocking_timeout_s,
        push_configs=PushConfigs(engine),
        push_policy=policy_from(settings),
        max_history=settings.max_history_length,
        keys=IdempotencyKeys(engine, settings.idempotency_ttl_s),
        stream_until=settings.send_stream_until,
        cascade=cascade,
        budget_usd=budget_usd,
    )
    return tasks, run, service


async def start_bus(settings: Settings, name: str, stack: AsyncExitStack) -> Bus:
    """The bus under `name` (a replica's, or the admin command line's): Redis with REDIS_URL, else this
    process alone; closed with `stack`."""
    bus: Bus = RedisBus(settings.redis_url, name) if settings.redis_url else MemoryBus(name)
    await bus.start()
    stack.push_async_callback(bus.aclose)
    return bus


def start_writer(engine: AsyncEngine, stack: AsyncExitStack) -> Writer:
    """The group-commit writer, stopped with `stack`. SQLite has one writer: a second flusher's transaction
    would only wait in SQLite's busy handler, whose sleeps (up to 100 ms each) were the tail of every answer
    under load."""
    writer = Writer(engine, flushers=1 if engine.dialect.name == "sqlite" else 3)
    writer.start()
    stack.push_async_callback(writer.stop)
    return writer


@dataclass(frozen=True, slots=True)
class _Shared:
    """What `wire` builds once for the process, which every role's components share."""

    settings: Settings
    engine: AsyncEngine
    bus: Bus
    writer: Writer
    deliverer: Deliverer
    discovery: Discovery
    instances: Instances
    usage: UsageReads
    retention: Retention
    sweep: Sweep | None
    """This process's workspace sweep; None when it runs no agent, or with AGENT_REPO_PATH."""
    prices: PriceTable
    metrics: Metrics | None
    every: dict[str, Components]
    """Every role's components, filled in as they are built (the default role's first)."""
    calls: CallsFactory
    """The calls of agents to agents, over every role's task service (read from `every` at each call)."""
    tree: Tree


@asynccontextmanager
async def wire(
    settings: Settings,
    agents: Agent | dict[str, Agent],
    authenticator: Authenticator,
    extra_skills: list[dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
    roles: dict[str, Role] | None = None,
) -> AsyncIterator[Components]:
    """The running components of one app (the default role's, with every role's in `roles`); on exit
    every one is stopped, the last started first. `agents` by role, or one Agent for the default role
    (`roles` then comes from the settings)."""
    roles = roles if roles is not None else roles_.load(settings)
    if isinstance(agents, Agent):
        agents = {next(iter(roles)): agents}
    async with AsyncExitStack() as stack:
        engine, deliverer_engine = _engines(settings, stack)
        stack.push_async_callback(authenticator.aclose)
        for name, role in roles.items():
            if role.runs_here:
                await agents[name].setup()
                stack.push_async_callback(agents[name].aclose)
        bus = await start_bus(settings, settings.replica_id, stack)
        writer = start_writer(engine, stack)
        sqlite = engine.dialect.name == "sqlite"
        deliverer = Deliverer(
            deliverer_engine, settings.replica_id, options_from(settings), async_commit=not sqlite
        )
        stack.push_async_callback(deliverer.stop)
        built_at = utcnow()
        card_options = CardOptions.from_settings(settings, authenticator.options)
        has_extended = extra_skills is not None
        cards = {
            name: build_card(card_options, agents[name], built_at, has_extended=has_extended, role=role)
            for name, role in roles.items()
        }
        every: dict[str, Components] = {}
        instances = Instances(engine)
        discovery = Discovery(
            instances,
            "replica",
            settings.replica_id,
            settings.discovery_heartbeat_s,
            settings.discovery_max_age_s,
            _instances(settings, roles, cards, every),
        )
        tree = Tree(engine)
        usage = UsageReads(engine)
        day = settings.budget_day_usd
        calls = CallsFactory(
            partial(_service, every),
            {name: _agent_info(name, cards[name]) for name in roles},
            discovery.live,
            tree,
            depth_limit=settings.agent_call_depth,
            wait_s=settings.agent_call_wait_s,
            hold_s=settings.worker_call_hold_s,
            limits=partial(_limits, every),
            day_budget=None if day is None else partial(_day_budget, usage, day),
            admit=partial(_admit_child, every),
        )
        shared = _Shared(
            settings,
            engine,
            bus,
            writer,
            deliverer,
            discovery,
            instances,
            usage,
            Retention(
                Pruning(engine, settings.retention_batch),
                partial(_expire, every),
                retention_days=settings.task_retention_days,
                waiting_ttl_s=settings.input_required_ttl_s,
                interval_s=settings.retention_interval_s,
            ),
            _sweep(settings, engine, roles),
            price_table(settings),
            metrics,
            every,
            calls,
            tree,
        )
        # One role: no role filter anywhere (today's queries and counters, exactly). Several: each role's
        # reads, leases, limits and control messages are its own.
        several = len(roles) > 1
        for name, role in roles.items():
            extended = (
                build_card(card_options, agents[name], built_at, extra_skills, True, role)
                if has_extended
                else None
            )
            every[name] = await _role(shared, stack, role, agents[name], (cards[name], extended), several)
        default = next(iter(roles.values()))
        root_cards = (
            build_card(
                card_options,
                agents[default.name],
                built_at,
                has_extended=has_extended,
                role=default,
                at_root=True,
            ),
            build_card(
                card_options, agents[default.name], built_at, extra_skills, True, default, at_root=True
            )
            if has_extended
            else None,
        )
        # The root endpoints: the default role's components with the root card (its root URLs).
        components = dataclasses.replace(
            every[default.name], card=root_cards[0], extended_card=root_cards[1], at_root=True
        )
        await _start(shared, stack, components, authenticator)
        yield components


def _engines(settings: Settings, stack: AsyncExitStack) -> tuple[AsyncEngine, AsyncEngine]:
    """The tasks' engine (with SQLite, its own WAL checkpoints) and the push deliverer's, disposed with
    `stack`. On PostgreSQL the deliverer has a small pool of its own, whose sessions commit without waiting
    for the WAL flush (`Outbox._begin`): no statement per transaction to say so, and a backlog being drained
    never holds the connections the tasks' requests need."""
    sqlite = make_url(settings.database_url).get_backend_name() == "sqlite"
    url, timeouts = settings.database_url, (settings.db_timeout_s, settings.db_statement_timeout_s)
    engine = create_engine(url, *timeouts, own_checkpoints=sqlite)
    stack.push_async_callback(engine.dispose)
    if sqlite:
        checkpoints = Checkpoints(engine)
        checkpoints.start()
        stack.push_async_callback(checkpoints.aclose)
        return engine, engine
    deliverer_engine = create_engine(url, *timeouts, pool_size=DELIVERER_POOL, synchronous_commit=False)
    stack.push_async_callback(deliverer_engine.dispose)
    return engine, deliverer_engine


async def _role(
    shared: _Shared,
    stack: AsyncExitStack,
    role: Role,
    agent: Agent,
    cards: tuple[Card, Card | None],
    several: bool,
) -> Components:
    """One role's components on the shared ones: its limits, parts, live tasks, runner (or `Idle`), reaper,
    task service and worker desk; its limits started (the runner and reaper are opened by `_start`)."""
    settings, name = shared.settings, role.name
    bus = shared.bus
    redis = bus.client if isinstance(bus, RedisBus) else None
    limited = limits.build(limits.LimitOptions.from_settings(settings), redis, name if several else None)
    await limited.start()
    stack.push_async_callback(limited.aclose)
    effects = not agent.pure
    parts = role_parts(settings, shared.engine, shared.writer, bus, name, several=several, runs_once=effects)
    executor = partial(_executor, settings, role, agent, shared.prices, shared.calls)
    ring = shared.deliverer.ring if settings.push_deliver else None
    cascade = partial(_cascade, shared.every, shared.tree)
    tasks, runner, service = role_stack(
        parts,
        executor,
        settings,
        shared.engine,
        push_ring=ring,
        exclusive=effects,
        cascade=cascade,
        budget_usd=role.budget_usd,
    )
    reaper = Reaper(
        parts.leases,
        Losses(
            tasks, ended=partial(_cascade, shared.every, shared.tree, why="ended failed: its run was lost")
        ),
        min(settings.queue_poll_s, settings.lease_ttl_s / 5),
        name,
        alive=runner.alive if isinstance(runner, Runner) else None,
        available=None if role.runs_here else partial(shared.discovery.available, name),
        role_wait_s=settings.role_wait_s,
    )
    announce = Announcer(
        shared.instances, _describe(settings, role, cards[0]), settings.discovery_heartbeat_s
    )
    return Components(
        public_url=settings.public_url,
        replica_id=settings.replica_id,
        sse_keepalive_s=settings.sse_keepalive_s,
        console_admins=settings.console_admin_set,
        service=service,
        card=cards[0],
        input_modes=tuple(agent.input_modes),
        extended_card=cards[1],
        limits=limited,
        engine=shared.engine,
        bus=bus,
        runner=runner,
        reaper=reaper,
        deliverer=shared.deliverer,
        tasks=tasks,
        writer=shared.writer,
        metrics=shared.metrics,
        role=name,
        roles=shared.every,
        workers=WorkerDesk(
            tasks,
            announce=announce,
            contexts=partial(Pruning(shared.engine).contexts, role=name),
            ended=partial(_cascade, shared.every, shared.tree, why="ended"),
        ),
        discovery=shared.discovery,
        usage=shared.usage,
        retention=shared.retention,
        sweep=shared.sweep,
        repos=repo_policy(agent),
        force=approval_mode(agent),
        calls=shared.calls,
        task_limits=TaskLimits(role.models, role.timeout_s, name, role.budget_usd),
        day_budget_usd=settings.budget_day_usd,
        skills=tuple(s["id"] for s in orjson.loads(cards[0].hybrid.body)["skills"]),
        task_role=partial(_task_role, shared.tree) if several else None,
        waiting_roles=shared.tree.waiting_roles if several else None,
    )


def _sweep(settings: Settings, engine: AsyncEngine, roles: Mapping[str, Role]) -> Sweep | None:
    """The sweep of this process's AGENT_WORKSPACE_ROOT, when a role's agents run here (each process sweeps
    its own disk; `agents/cli/sweep.py`)."""
    if settings.agent_repo_path or not any(r.runs_here for r in roles.values()):
        return None
    return sweep_of(settings, Pruning(engine).contexts)


def sweep_of(settings: Settings, contexts: Contexts) -> Sweep:
    """A sweep of AGENT_WORKSPACE_ROOT and REPO_CACHE_ROOT on this machine, asking `contexts` about the
    contexts it finds (the store's: a replica's loop and `a2a-server prune`; the server's: a remote
    worker's)."""
    return Sweep(
        Path(settings.agent_workspace_root).resolve(),
        RepoCache(Path(settings.repo_cache_root).resolve(), timeout_s=settings.repo_git_timeout_s),
        contexts,
        retention_days=settings.task_retention_days,
        interval_s=settings.retention_interval_s,
    )


def _executor(
    settings: Settings, role: Role, agent: Agent, prices: PriceTable, calls: CallsFactory, tasks: LiveTasks
) -> Runner | Idle:
    """The role's runner on its live tasks, or `Idle` when this process does not run it (`AGENT_ROLES`);
    its runs call other agents through `calls`."""
    if not role.runs_here:
        return Idle(tasks)
    return Runner(
        tasks,
        tasks.parts.leases,
        tasks.parts.bus,
        agent,
        max_concurrent=role.slots,
        timeout_s=role.timeout_s,
        cancel_grace_s=settings.cancel_grace_s,
        lease_ttl_s=settings.lease_ttl_s,
        queue_poll_s=settings.queue_poll_s,
        prices=prices,
        role=role.name,
        calls=partial(_run_calls, calls, role.name),
        checkpoints=partial(_run_checkpoints, tasks.parts),
    )


def _run_checkpoints(parts: RoleParts, live: LiveTask) -> CheckpointStore:
    """A run's checkpoint store on this replica: its task's row of `task_checkpoints`."""
    assert parts.checkpoints is not None
    return TaskCheckpoints(parts.checkpoints, live.task.id, live.owner, parts.replica_id)


def _run_calls(calls: CallsFactory, role: str, live: LiveTask) -> AgentCalls:
    """The calls of a run here of `live`, a task of `role`."""
    return calls.for_parent(live.owner, live.task.id, role, live.task.metadata)


def _service(every: Mapping[str, Components], role: str) -> TaskService | None:
    c = every.get(role)
    return c.service if c is not None else None


async def _day_budget(usage: UsageReads, cap: float, owner: str) -> None:
    """Raises while `owner`'s spend today has reached BUDGET_DAY_USD (a run's new child meets it)."""
    await check_day(usage.day_cost, owner, cap)


async def _task_role(tree: Tree, owner: str, task_id: str) -> str | None:
    """The role of the owner's task (None: no such task of this owner)."""
    node = await tree.node(owner, task_id)
    return node.role if node is not None else None


def _limits(every: Mapping[str, Components], role: str) -> limits.Limits | None:
    c = every.get(role)
    return c.limits if c is not None else None


def _admit_child(every: Mapping[str, Components], role: str, message: Message) -> None:
    """The checks of a client's message that a run's new child meets on `role` too: the media types the
    role takes (-32005) and its files' names, sizes and URLs (REPO_ALLOW's file limits, -32602)."""
    c = every.get(role)
    if c is None:
        return
    check_parts(message, c.input_modes)
    if c.repos is not None:
        try:
            c.repos.attachments(message.parts)
        except RepoError as exc:
            raise InvalidParamsError(str(exc), {"field": "parts"}) from None


def _agent_info(role: str, role_card: Card) -> AgentInfo:
    """A role as a run's `list_agents` shows it, from its public card (available: filled in at the call)."""
    public = orjson.loads(role_card.hybrid.body)
    return AgentInfo(
        role=role,
        name=public["name"],
        description=public["description"],
        skills=tuple(public["skills"]),
        available=False,
    )


async def _cascade(
    every: Mapping[str, Components], tree: Tree, owner: str, task_id: str, *, why: str = "was canceled"
) -> None:
    """Cancel the children of a canceled task that still run, each through its role's service (which
    cancels its own children in turn); also of a remote worker's task that ended (`why`: "ended"), and of a
    task the reaper failed (its run lost)."""

    async def cancel(role: str, child: str) -> None:
        c = every.get(role)
        if c is None:
            return
        try:
            await c.service.cancel(owner, child, reason=f"Its parent task {task_id} {why}")
        except (TaskNotCancelableError, TaskNotFoundError):
            pass  # it ended (or went) meanwhile
        except A2AError as exc:
            log.warning("task %s: its child %s could not be canceled: %s", task_id, child, exc.message)

    try:
        children = await tree.open_children(owner, task_id)
    except Exception:
        log.exception("task %s: its children could not be read to cancel them", task_id)
        return
    await asyncio.gather(*(cancel(n.role, n.task_id) for n in children))


async def _start(
    shared: _Shared, stack: AsyncExitStack, components: Components, authenticator: Authenticator
) -> None:
    """Open what runs in the background, in order, each closed with `stack` before what it needs."""
    for c in shared.every.values():
        await c.runner.open()
        stack.push_async_callback(c.runner.aclose)
        # After its runner's recovery, closed before the runner.
        await c.reaper.open()
        stack.push_async_callback(c.reaper.aclose)
    # Once the runners are open, closed before them: listed only while this process takes work.
    await shared.discovery.start()
    stack.push_async_callback(shared.discovery.aclose)
    # Its cancels go through the services: started once they run, stopped before them.
    await shared.retention.open()
    stack.push_async_callback(shared.retention.aclose)
    if shared.sweep is not None:
        await shared.sweep.open()
        stack.push_async_callback(shared.sweep.aclose)
    if shared.settings.push_deliver:
        shared.deliverer.start()
    if shared.settings.grpc_port:
        # Started last, stopped first: its calls finish (a short grace) while the service still runs.
        services = (grpc_v10.SERVICE, grpc_v03.SERVICE)
        options = grpc_server.GrpcOptions.from_settings(shared.settings)
        served = await grpc_server.start(components, authenticator, services, options)
        stack.push_async_callback(served.stop)


async def _expire(every: Mapping[str, Components], role: str, owner: str, task_id: str, reason: str) -> bool:
    """Cancel a task that waited too long, through its role's service (as a client's cancel: forwarded to
    the replica holding it, which stops the waiting run); whether it was canceled."""
    c = every.get(role)
    if c is None:
        log.warning("retention: task %s is of the role %r, not configured here; left waiting", task_id, role)
        return False
    try:
        await c.service.cancel(owner, task_id, reason=reason)
    except (TaskNotCancelableError, TaskNotFoundError):
        return False  # it ended (or went) meanwhile
    except InternalError as exc:
        log.warning("retention: task %s could not be canceled now: %s", task_id, exc.message)
        return False
    return True


def _running(every: Mapping[str, Components], role: str) -> int:
    return every[role].runner.running


def _describe(settings: Settings, role: Role, role_card: Card) -> InstanceRecord:
    """How discovery describes an instance of the role, as its card does (instance id, kind and load are
    filled in by who announces it: this process, or the replica a remote worker talks to)."""
    public = orjson.loads(role_card.hybrid.body)
    capabilities: dict[str, Any] = {
        "agent": public["name"],
        "adapter": role.entry.adapter,
        **({"model": m} if (m := role.entry.model or settings.agent_model) else {}),
        "streaming": public["capabilities"].get("streaming", False),
        "pushNotifications": public["capabilities"].get("pushNotifications", False),
        "skills": [s["id"] for s in public["skills"]],
        "inputModes": public["defaultInputModes"],
        "outputModes": public["defaultOutputModes"],
    }
    return InstanceRecord(
        role=role.name,
        instance_id="",
        kind="worker",
        description=public["description"],
        card_url=f"{settings.public_url}{role.path}{CARD_PATH}",
        capabilities=capabilities,
    )


def _instances(
    settings: Settings,
    roles: dict[str, Role],
    cards: Mapping[str, Card],
    every: Mapping[str, Components],
) -> list[Instance]:
    """This process's instance of each role it runs, as its card describes it; its running agents are read
    from the role's runner (in `every` once wired) at each heartbeat."""
    return [
        Instance(_describe(settings, role, cards[name]), role.slots, partial(_running, every, name))
        for name, role in roles.items()
        if role.runs_here
    ]
