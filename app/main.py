"""The app factory: wires store, bus, task service, runner and agent in the lifespan."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from app.agents.loader import load_agent
from app.agents.sdk import Agent
from app.api import card, health, jsonrpc, openapi, rest, rest_v03, rest_v10
from app.api.admission import Limits
from app.api.auth import Authenticator
from app.api.auth_guard import CorsExceptCard, Guard
from app.api.deps import Components
from app.api.fallback import Fallback, http_error
from app.api.slashes import StripTrailingSlash
from app.bus.base import Bus
from app.bus.memory import MemoryBus
from app.bus.redis import RedisBus
from app.protocol.model import utcnow
from app.push.configs import PushConfigs
from app.push.deliverer import Deliverer, options_from
from app.runner.runner import Runner
from app.settings import Settings, get_settings
from app.store.db import create_engine
from app.store.idempotency import IdempotencyKeys
from app.store.leases import Leases
from app.store.repo import Repository
from app.store.writer import Writer
from app.tasks.service import TaskService

log = logging.getLogger(__name__)


def _tune_gc() -> None:
    """Freeze what start-up created and collect young objects less often.

    With the defaults, full collections rescanned every module-level object (tens of ms each) and all
    generations together took about 15% of the CPU under load, showing up as tail latency.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def create_app(settings: Settings | None = None, agent: Agent | None = None) -> FastAPI:
    settings = settings or get_settings()
    agent = agent or load_agent(settings.agent_adapter, settings.agent_options, settings=settings)
    # Both raise SettingError for settings that cannot work, before anything starts.
    authenticator = Authenticator(settings)
    extra_skills = card.extended_skills(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.database_url, settings.db_timeout_s, settings.db_statement_timeout_s)
        writer = Writer(engine)
        writer.start()
        bus: Bus = (
            RedisBus(settings.redis_url, settings.replica_id)
            if settings.redis_url
            else MemoryBus(settings.replica_id)
        )
        await bus.start()
        leases = Leases(engine, settings.replica_id, settings.lease_ttl_s)
        limits = Limits(settings, bus.client if isinstance(bus, RedisBus) else None)
        await limits.start()
        push = options_from(settings)
        service = TaskService(
            Repository(engine),
            writer,
            bus,
            leases,
            settings.blocking_timeout_s,
            push_configs=PushConfigs(engine),
            push_policy=push.policy,
            max_history=settings.max_history_length,
            keys=IdempotencyKeys(engine, settings.idempotency_ttl_s),
            outage_grace_s=settings.db_outage_grace_s,
        )
        deliverer = Deliverer(engine, settings.replica_id, push)
        if settings.push_deliver:
            service.push_ring = deliverer.ring
        runner = Runner(
            service,
            agent,
            max_concurrent=settings.max_concurrent_tasks,
            timeout_s=settings.agent_timeout_s,
            cancel_grace_s=settings.cancel_grace_s,
            lease_ttl_s=settings.lease_ttl_s,
            queue_poll_s=settings.queue_poll_s,
        )
        app.state.engine = engine
        app.state.bus = bus
        app.state.runner = runner
        app.state.deliverer = deliverer
        built_at = utcnow()
        has_extended = extra_skills is not None
        app.state.components = Components(
            settings=settings,
            service=service,
            card=card.build_card(settings, agent, built_at, has_extended=has_extended),
            input_modes=tuple(agent.input_modes),
            extended_card=(
                card.build_card(settings, agent, built_at, extra_skills, has_extended)
                if has_extended
                else None
            ),
            limits=limits,
        )
        await agent.setup()
        await runner.open()
        if settings.push_deliver:
            deliverer.start()
        _tune_gc()
        try:
            yield
        finally:
            await runner.aclose()
            await deliverer.stop()
            await writer.stop()
            await limits.aclose()
            await bus.aclose()
            await agent.aclose()
            await authenticator.aclose()
            await engine.dispose()

    app = FastAPI(
        title="A2A coding-agent server",
        # FastAPI's native OpenTelemetry hooks look up providers on every request; nothing here
        # configures them, so they would only add cost to each call.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.include_router(card.router)
    app.include_router(jsonrpc.router)
    app.include_router(rest.router)
    # v0.3 before v1.0: `/a2a/rest/v1/...` is the v0.3 binding, not a v1.0 tenant named `v1`.
    app.include_router(rest_v03.router)
    app.include_router(rest_v10.router)
    app.include_router(health.router)
    app.include_router(openapi.router)
    app.state.authenticator = authenticator
    # Added last is outermost: CORS answers preflights before the guard asks for a credential.
    app.add_middleware(Guard, authenticator=authenticator, max_body_bytes=settings.max_body_bytes)
    if settings.cors_origin_list:
        app.add_middleware(CorsExceptCard, origins=settings.cors_origin_list)
    # Outside the guard and CORS: whatever escapes them is answered in the binding's error shape.
    app.add_middleware(Fallback)
    # Outermost: a trailing slash is dropped before CORS, the guard and the router look at the path.
    app.add_middleware(StripTrailingSlash)
    app.router.redirect_slashes = False

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        return http_error(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        body = {"error": {"code": 400, "message": "Invalid request"}}
        return Response(orjson.dumps(body), 400, media_type="application/json")

    return app
