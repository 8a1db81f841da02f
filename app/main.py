"""The app factory: routes and middleware; the lifespan runs the components `app.wiring` builds."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.routing import Route

from app import roles as roles_
from app.agents.options import AgentOptions
from app.agents.sdk import Agent
from app.api.bindings import jsonrpc, openapi, rest, rest_v03, rest_v10
from app.api.bindings.mcp import McpEndpoint
from app.api.card import routes as card_routes, signing as card_signing
from app.api.card.build import extended_skills
from app.api.card.options import CardOptions
from app.api.edge.auth import Authenticator, AuthOptions
from app.api.edge.auth_guard import CorsExceptCard, Guard
from app.api.edge.fallback import Fallback, http_error
from app.api.edge.metrics import Metrics, RequestMetrics
from app.api.edge.observe import Observe
from app.api.edge.slashes import StripTrailingSlash
from app.api.endpoints import console, health, worker_calls, worker_checkpoints, workers
from app.api.endpoints.discovery import router as discovery_router
from app.api.endpoints.metrics_live import Live
from app.api.endpoints.usage import router as usage_router
from app.api.extensions import EchoExtensions
from app.api.paths import MCP_PATH
from app.roles import Role
from app.settings import Settings, get_settings
from app.tasks.worker_wire import checkpoint_body_max
from app.wiring import price_table, wire

log = logging.getLogger(__name__)

NO_NATIVE_TELEMETRY: Any = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's native OpenTelemetry hooks stay off (the root app's and each role's): they would look the
providers up on every request, and with tracing on (`app/telemetry/traces.py` sets the global provider) make
a second span per request beside `api/edge/observe.py`'s."""


def create_app(settings: Settings | None = None, agent: Agent | None = None) -> FastAPI:
    """The app for `settings`; `agent`, when given, is the default role's agent (tests, embedding)."""
    settings = settings or get_settings()
    # All raise SettingError (or AdapterError) for settings that cannot work, before anything starts.
    roles = roles_.load(settings)
    base = AgentOptions.from_settings(settings)
    agents = {
        name: agent
        if agent is not None and i == 0
        else roles_.role_agent(settings, role, len(roles) > 1, base)
        for i, (name, role) in enumerate(roles.items())
    }
    authenticator = Authenticator(AuthOptions.from_settings(settings))
    card_options = CardOptions.from_settings(settings, authenticator.options)
    extra_skills = extended_skills(card_options)
    card_signing.signer(card_options.signing)  # a key that cannot sign fails here, before anything starts
    price_table(settings)  # a bad PRICE_TABLE_FILE fails start-up here, before anything starts

    metrics = Metrics() if settings.metrics_enabled else None
    # Every role, the default one included: the same bindings under /agents/{role}, over its own components.
    mounts = {name: _role_app() for name, role in roles.items() if role.path}
    mcp = McpEndpoint(settings.max_body_bytes)
    app = FastAPI(
        title="A2A coding-agent server",
        telemetry=NO_NATIVE_TELEMETRY,
        lifespan=lifespan(settings, roles, agents, authenticator, extra_skills, metrics, mounts, mcp),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    _bindings(app)
    app.include_router(health.router)
    app.include_router(workers.router)
    app.include_router(worker_calls.router)
    app.include_router(worker_checkpoints.router)
    app.include_router(discovery_router)
    app.include_router(usage_router)
    app.include_router(openapi.router)
    app.include_router(console.router)
    # MCP for hosts, every role's tasks at one endpoint, behind the same guard (`api/bindings/mcp.py`).
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    if metrics is not None:
        metrics.watch(Live(lambda: getattr(app.state, "components", None)))
        app.include_router(metrics.router())
    app.state.authenticator = authenticator
    # Innermost: a JSON-RPC POST to the root app skips the router (`jsonrpc.Lane`).
    app.add_middleware(jsonrpc.Lane)
    # Next: the extensions a call activated, echoed in its response's headers.
    app.add_middleware(EchoExtensions)
    # Added last is outermost: CORS answers preflights before the guard asks for a credential.
    app.add_middleware(
        Guard,
        authenticator=authenticator,
        max_body_bytes=settings.max_body_bytes,
        checkpoint_body_bytes=checkpoint_body_max(int(settings.checkpoint_max_mb * 1024 * 1024)),
    )
    if settings.cors_origin_list:
        app.add_middleware(CorsExceptCard, origins=settings.cors_origin_list)
    # Outside the guard and CORS: whatever escapes them is answered in the binding's error shape.
    app.add_middleware(Fallback)
    # Outside the fallback, so every answer is counted, refusals and faults included.
    if metrics is not None:
        app.add_middleware(RequestMetrics, metrics=metrics)
    # Outside the metrics: the request's log fields and span (app/api/edge/observe.py) cover all of it.
    app.add_middleware(Observe)
    # Outermost: a trailing slash is dropped before CORS, the guard and the router look at the path.
    app.add_middleware(StripTrailingSlash)
    app.router.redirect_slashes = False
    for name, sub in mounts.items():
        app.mount(roles[name].path, sub)

    _error_handlers(app)
    return app


def _bindings(app: FastAPI) -> None:
    """The card and every A2A binding, on the root app or a role's."""
    app.include_router(card_routes.router)
    app.include_router(jsonrpc.router)
    app.include_router(rest.router)
    # v0.3 before v1.0: `/a2a/rest/v1/...` is the v0.3 binding, not a v1.0 tenant named `v1`.
    app.include_router(rest_v03.router)
    app.include_router(rest_v10.router)


def _role_app() -> FastAPI:
    """A role's endpoints (the default role's too, beside the root's): mounted at /agents/{role}, behind
    the root app's middleware (the guard, CORS, the fallback, the metrics), its components set by the
    lifespan."""
    sub = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, telemetry=NO_NATIVE_TELEMETRY)
    _bindings(sub)
    sub.router.redirect_slashes = False
    _error_handlers(sub)
    return sub


def _error_handlers(app: FastAPI) -> None:
    """The router's own refusals in the bindings' error shapes."""

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        return http_error(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        body = {"error": {"code": 400, "message": "Invalid request"}}
        return Response(orjson.dumps(body), 400, media_type="application/json")


def lifespan(
    settings: Settings,
    roles: dict[str, Role],
    agents: dict[str, Agent],
    authenticator: Authenticator,
    extra_skills: list[dict[str, Any]] | None = None,
    metrics: Metrics | None = None,
    mounts: dict[str, FastAPI] | None = None,
    mcp: McpEndpoint | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the components `wire` builds, in `app.state.components` (the default role's)
    and in each other role's mounted app (`mounts`, by role) while it serves; `mcp`'s request handling runs
    inside it, stopped before the components."""

    @asynccontextmanager
    async def serve(app: FastAPI) -> AsyncIterator[None]:
        async with wire(settings, agents, authenticator, extra_skills, metrics, roles) as components:
            app.state.components = components
            for name, sub in (mounts or {}).items():
                sub.state.components = components.roles[name]
            _tune_gc()
            if mcp is None:
                yield
                return
            async with mcp.run():
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
