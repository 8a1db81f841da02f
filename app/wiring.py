"""Wiring: builds the store, bus, push deliverer and discovery once, and per role the limits, live tasks,
runner (or `Idle`, for a role this process does not run) and task service, each given what it uses, then
the gRPC server on them (when GRPC_PORT is set), and tears them down in the reverse order (an
`AsyncExitStack`, so teardown mirrors setup). `lifespan` runs them for the FastAPI app: the default role's
components in `app.state.components`, every other role's in its mounted sub-app's state (`mounts`)."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from app import limits, roles as roles_
from app.agents.loader import AdapterError, load_agent
from app.agents.options import AgentOptions
from app.agents.sdk import Agent
from app.api.bindings import grpc_server, grpc_v03, grpc_v10
from app.api.card.build import Card, build_card
from app.api.card.options import CardOptions
from app.api.deps import Components
from app.api.edge.auth import Authenticator
from app.api.edge.metrics import Metrics
from app.api.paths import CARD_PATH
from app.bus.base import Bus
from app.bus.memory import MemoryBus
from app.bus.redis import RedisBus
from app.protocol.errors import InternalError, TaskNotCancelableError, TaskNotFoundError
from app.protocol.model import utcnow
from app.push.configs import PushConfigs
from app.push.deliverer import POOL as DELIVERER_POOL, Deliverer, options_from
from app.roles import Role
from app.runner.discovery import Discovery, Instance
from app.runner.idle import Idle
from app.runner.prices import PriceTable, PriceTableError
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
from app.store.usage import UsageReads
from app.store.writer import Writer
from app.tasks.live import LiveTasks
from app.tasks.losses import Losses
from app.tasks.service import TaskService
from app.tasks.workers import Announcer, WorkerDesk
from app.telemetry import logs

__all__ = ["Components", "lifespan", "price_table", "role_agent", "wire"]

log = logging.getLogger(__name__)


def lifespan(
    settings: Settings,
    roles: dict[str, Role],
    agents: dict[str, Agent],
    authenticator: Authenticator,
    extra_skills: list[dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
    mounts: dict[str, FastAPI] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the components `wire` builds, in `app.state.components` (the default role's)
    and in each other role's mounted app (`mounts`, by role) while it serves."""

    @asynccontextmanager
    async def serve(app: FastAPI) -> AsyncIterator[None]:
        async with wire(settings, agents, authenticator, extra_skills, metrics, roles) as components:
            app.state.components = components
            for name, sub in (mounts or {}).items():
                sub.state.components = components.roles[name]
            _tune_gc()
            yield

    return serve


def _tune_gc() -> None:
    """Freeze what start-up created and collect young objects less often.

    With the defaults, full collections rescanned every module-level object (tens of ms each) and all
    generations together took about 15% of the CPU under load, showing up as tail latency.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def price_table(settings: Settings) -> PriceTable:
    """The price table: the built-in one with PRICE_TABLE_FILE over it (SettingError, one line, if bad)."""
    try:
        return PriceTable.load(settings.price_table_file)
    except PriceTableError as exc:
        raise SettingError("PRICE_TABLE_FILE", str(exc)) from None


def role_agent(
    settings: Settings, role: roles_.Role, several: bool, base: AgentOptions | None = None
) -> Agent:
    """The role's agent, given the options built for its role (never the server's whole settings): the
    role's over the server-wide ones (`base`, built from `settings` when not given). A failure names the
    role."""
    named = several or role.name != roles_.DEFAULT or bool(settings.agents or settings.agents_file)
    base = base or AgentOptions.from_settings(settings)
    try:
        options = roles_.agent_options(base, role, named)
        # The agents' environment may hold their API keys: masked in every log record from now on.
        passed = (os.environ[n] for n in options.env_passthrough if n in os.environ)
        logs.add_secrets([*options.env.values(), *passed])
        return load_agent(role.entry.adapter, role.entry.options, agent_options=options)
    except (AdapterError, SettingError) as exc:
        if not named or (isinstance(exc, SettingError) and exc.name == "AGENTS"):
            raise
        field = "options" if isinstance(exc, AdapterError) and exc.options else "adapter"
        if isinstance(exc, SettingError):
            field = exc.name.lower()
        raise SettingError("AGENTS", f"role {role.name!r}, field {field}: {exc}") from None


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
        sqlite = make_url(settings.database_url).get_backend_name() == "sqlite"
        engine = create_engine(
            settings.database_url,
            settings.db_timeout_s,
            settings.db_statement_timeout_s,
            own_checkpoints=sqlite,
        )
        stack.push_async_callback(engine.dispose)
        if sqlite:
            checkpoints = Checkpoints(engine)
            checkpoints.start()
            stack.push_async_callback(checkpoints.aclose)
        stack.push_async_callback(authenticator.aclose)
        for name, role in roles.items():
            if role.runs_here:
                await agents[name].setup()
                stack.push_async_callback(agents[name].aclose)
        bus: Bus = (
            RedisBus(settings.redis_url, settings.replica_id)
            if settings.redis_url
            else MemoryBus(settings.replica_id)
        )
        await bus.start()
        stack.push_async_callback(bus.aclose)
        # SQLite has one writer: a second flusher's transaction would only wait in SQLite's busy handler,
        # whose sleeps (up to 100 ms each) were the tail of every answer under load.
        writer = Writer(engine, flushers=1 if engine.dialect.name == "sqlite" else 3)
        writer.start()
        stack.push_async_callback(writer.stop)
        push = options_from(settings)
        prices = price_table(settings)
        # On PostgreSQL the deliverer has a small pool of its own, whose sessions commit without waiting
        # for the WAL flush (`Outbox._begin`): no statement per transaction to say so, and a backlog being
        # drained never holds the connections the tasks' requests need.
        deliverer_engine = engine
        if not sqlite:
            deliverer_engine = create_engine(
                settings.database_url,
                settings.db_timeout_s,
                settings.db_statement_timeout_s,
                pool_size=DELIVERER_POOL,
                synchronous_commit=False,
            )
            stack.push_async_callback(deliverer_engine.dispose)
        deliverer = Deliverer(deliverer_engine, settings.replica_id, push, async_commit=not sqlite)
        stack.push_async_callback(deliverer.stop)
        built_at = utcnow()
        card_options = CardOptions.from_settings(settings, authenticator.options)
        has_extended = extra_skills is not None
        # One role: no role filter anywhere (today's queries and counters, exactly). Several: each role's
        # reads, leases, limits and control messages are its own.
        several = len(roles) > 1
        every: dict[str, Components] = {}
        cards = {
            name: build_card(card_options, agents[name], built_at, has_extended=has_extended, role=role)
            for name, role in roles.items()
        }
        instances = Instances(engine)
        usage = UsageReads(engine)
        retention = Retention(
            Pruning(engine, settings.retention_batch),
            partial(_expire, every),
            retention_days=settings.task_retention_days,
            waiting_ttl_s=settings.input_required_ttl_s,
            interval_s=settings.retention_interval_s,
        )
        discovery = Discovery(
            instances,
            "replica",
            settings.replica_id,
            settings.discovery_heartbeat_s,
            settings.discovery_max_age_s,
            _instances(settings, roles, cards, every),
        )
        limit_options = limits.LimitOptions.from_settings(settings)
        for name, role in roles.items():
            scope = name if several else None
            shared = limits.build(limit_options, bus.client if isinstance(bus, RedisBus) else None, scope)
            await shared.start()
            stack.push_async_callback(shared.aclose)
            repo = Repository(engine, scope)
            effects = not agents[name].pure
            leases = Leases(engine, settings.replica_id, settings.lease_ttl_s, scope, runs_once=effects)
            tasks = LiveTasks(
                repo,
                writer,
                bus,
                leases,
                outage_grace_s=settings.db_outage_grace_s,
                push_ring=deliverer.ring if settings.push_deliver else None,
                role=scope,
                role_name=name,
                exclusive=effects,
            )
            losses = Losses(tasks)
            runner: Runner | Idle = (
                Runner(
                    tasks,
                    leases,
                    bus,
                    agents[name],
                    max_concurrent=role.slots,
                    timeout_s=role.timeout_s,
                    cancel_grace_s=settings.cancel_grace_s,
                    lease_ttl_s=settings.lease_ttl_s,
                    queue_poll_s=settings.queue_poll_s,
                    prices=prices,
                    role=name,
                    losses=losses,
                )
                if role.runs_here
                else Idle(
                    tasks,
                    losses,
                    leases,
                    bus,
                    min(settings.queue_poll_s, settings.lease_ttl_s / 5),
                    name,
                    partial(discovery.available, name),
                    settings.role_wait_s,
                )
            )
            service = TaskService(
                tasks,
                runner,
                blocking_timeout_s=settings.blocking_timeout_s,
                push_configs=PushConfigs(engine),
                push_policy=push.policy,
                max_history=settings.max_history_length,
                keys=IdempotencyKeys(engine, settings.idempotency_ttl_s),
                stream_until=settings.send_stream_until,
            )
            agent = agents[name]
            every[name] = Components(
                public_url=settings.public_url,
                replica_id=settings.replica_id,
                sse_keepalive_s=settings.sse_keepalive_s,
                console_admins=settings.console_admin_set,
                service=service,
                card=cards[name],
                input_modes=tuple(agent.input_modes),
                extended_card=(
                    build_card(card_options, agent, built_at, extra_skills, has_extended, role=role)
                    if has_extended
                    else None
                ),
                limits=shared,
                engine=engine,
                bus=bus,
                runner=runner,
                deliverer=deliverer,
                tasks=tasks,
                writer=writer,
                metrics=metrics,
                role=name,
                roles=every,
                workers=WorkerDesk(
                    tasks,
                    repo,
                    engine,
                    bus,
                    settings.lease_ttl_s,
                    scope,
                    announce=Announcer(
                        instances, _describe(settings, role, cards[name]), settings.discovery_heartbeat_s
                    ),
                ),
                discovery=discovery,
                usage=usage,
                retention=retention,
            )
        for c in every.values():
            await c.runner.open()
            stack.push_async_callback(c.runner.aclose)
        # Once the runners are open, closed before them: listed only while this process takes work.
        await discovery.start()
        stack.push_async_callback(discovery.aclose)
        # Its cancels go through the services: started once they run, stopped before them.
        await retention.open()
        stack.push_async_callback(retention.aclose)
        if settings.push_deliver:
            deliverer.start()
        components = next(iter(every.values()))
        if settings.grpc_port:
            # Started last, stopped first: its calls finish (a short grace) while the service still runs.
            services = (grpc_v10.SERVICE, grpc_v03.SERVICE)
            served = await grpc_server.start(
                components, authenticator, services, grpc_server.GrpcOptions.from_settings(settings)
            )
            stack.push_async_callback(served.stop)
        yield components


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
    out = []
    for name, role in roles.items():
        if not role.runs_here:
            continue
        described = _describe(settings, role, cards[name])
        out.append(
            Instance(
                role=name,
                description=described.description,
                card_url=described.card_url,
                capabilities=described.capabilities,
                slots=role.slots,
                running=partial(_running, every, name),
            )
        )
    return out
