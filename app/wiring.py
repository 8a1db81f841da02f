"""Wiring: builds the store, bus, limits, task service, runner and push deliverer for one app, each given
what it uses, then the gRPC server on them (when GRPC_PORT is set), and tears them down in the reverse
order (an `AsyncExitStack`, so teardown mirrors setup). `lifespan` runs them for the FastAPI app, as
`app.state.components`."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI

from app import limits
from app.agents.sdk import Agent
from app.api import card, grpc_server, grpc_v03, grpc_v10
from app.api.auth import Authenticator
from app.api.deps import Components
from app.api.metrics import Metrics
from app.bus.base import Bus
from app.bus.memory import MemoryBus
from app.bus.redis import RedisBus
from app.protocol.model import utcnow
from app.push.configs import PushConfigs
from app.push.deliverer import Deliverer, options_from
from app.runner.runner import Runner
from app.settings import Settings
from app.store.db import create_engine
from app.store.idempotency import IdempotencyKeys
from app.store.leases import Leases
from app.store.repo import Repository
from app.store.writer import Writer
from app.tasks.live import LiveTasks
from app.tasks.service import TaskService

__all__ = ["Components", "lifespan", "wire"]


def lifespan(
    settings: Settings,
    agent: Agent,
    authenticator: Authenticator,
    extra_skills: list[dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the components `wire` builds, in `app.state.components` while it serves."""

    @asynccontextmanager
    async def serve(app: FastAPI) -> AsyncIterator[None]:
        async with wire(settings, agent, authenticator, extra_skills, metrics) as components:
            app.state.components = components
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


@asynccontextmanager
async def wire(
    settings: Settings,
    agent: Agent,
    authenticator: Authenticator,
    extra_skills: list[dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[Components]:
    """The running components of one app; on exit every one is stopped, the last started first."""
    async with AsyncExitStack() as stack:
        engine = create_engine(settings.database_url, settings.db_timeout_s, settings.db_statement_timeout_s)
        stack.push_async_callback(engine.dispose)
        stack.push_async_callback(authenticator.aclose)
        await agent.setup()
        stack.push_async_callback(agent.aclose)
        bus: Bus = (
            RedisBus(settings.redis_url, settings.replica_id)
            if settings.redis_url
            else MemoryBus(settings.replica_id)
        )
        await bus.start()
        stack.push_async_callback(bus.aclose)
        shared = limits.build(settings, bus.client if isinstance(bus, RedisBus) else None)
        await shared.start()
        stack.push_async_callback(shared.aclose)
        writer = Writer(engine)
        writer.start()
        stack.push_async_callback(writer.stop)
        push = options_from(settings)
        deliverer = Deliverer(engine, settings.replica_id, push)
        stack.push_async_callback(deliverer.stop)
        repo = Repository(engine)
        leases = Leases(engine, settings.replica_id, settings.lease_ttl_s)
        tasks = LiveTasks(
            repo,
            writer,
            bus,
            leases,
            outage_grace_s=settings.db_outage_grace_s,
            push_ring=deliverer.ring if settings.push_deliver else None,
        )
        runner = Runner(
            tasks,
            leases,
            bus,
            agent,
            max_concurrent=settings.max_concurrent_tasks,
            timeout_s=settings.agent_timeout_s,
            cancel_grace_s=settings.cancel_grace_s,
            lease_ttl_s=settings.lease_ttl_s,
            queue_poll_s=settings.queue_poll_s,
        )
        service = TaskService(
            tasks,
            repo,
            writer,
            bus,
            leases,
            runner,
            settings.blocking_timeout_s,
            push_configs=PushConfigs(engine),
            push_policy=push.policy,
            max_history=settings.max_history_length,
            keys=IdempotencyKeys(engine, settings.idempotency_ttl_s),
        )
        built_at = utcnow()
        has_extended = extra_skills is not None
        await runner.open()
        stack.push_async_callback(runner.aclose)
        if settings.push_deliver:
            deliverer.start()
        components = Components(
            settings=settings,
            service=service,
            card=card.build_card(settings, agent, built_at, has_extended=has_extended),
            input_modes=tuple(agent.input_modes),
            extended_card=(
                card.build_card(settings, agent, built_at, extra_skills, has_extended)
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
        )
        if settings.grpc_port:
            # Started last, stopped first: its calls finish (a short grace) while the service still runs.
            served = await grpc_server.start(components, authenticator, (grpc_v10.SERVICE, grpc_v03.SERVICE))
            stack.push_async_callback(served.stop)
        yield components
