"""Prometheus metrics at `GET /metrics` (text exposition format), one registry per app.

Two kinds, so a request pays almost nothing for them:
- counted as they happen, by an ASGI layer (`RequestMetrics`): HTTP requests per binding and status, the
  duration of every non-streaming answer, the SSE streams open now; gRPC calls by the gRPC binding
  (`grpc_server.py`) the same way;
- read when Prometheus scrapes (`metrics_live.Live`): what the components already count for themselves as
  plain integers (tasks created and ended, the writer's commits, agent runs, webhook deliveries, the database
  pool, the tokens and cost of the usage reports recorded), so nothing on the send path touches a metric
  object.

Every figure is this replica's: sum them across replicas (a task is counted by the replica that held it).
Like `/healthz` the path needs no credential; `METRICS_ENABLED=false` removes it.
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..paths import CARD_PATHS, JSONRPC_PATHS, MCP_PATH, METRICS_PATH, OPS_PATHS, route_path
from .asgi import HttpLayer

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def binding_of(path: str) -> str:
    """The label a request is counted under: the binding (or endpoint family) its path belongs to."""
    if path in JSONRPC_PATHS:
        return "jsonrpc"
    if path.startswith("/a2a/rest/v1/") or path == "/a2a/rest/v1":
        return "rest_v03"
    if path.startswith("/a2a/rest"):
        return "rest_v10"
    if path.startswith("/a2a/tasks"):
        return "tasks_alias"
    if path in CARD_PATHS:
        return "card"
    if path in OPS_PATHS:
        return "ops"
    if path == MCP_PATH:
        return "mcp"
    return "other"


class Metrics:
    """The app's registry and the metrics counted as requests happen."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "a2a_http_requests",
            "HTTP requests answered, by binding and status code.",
            ["binding", "code"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "a2a_http_request_duration_seconds",
            "Time to the end of a non-streaming answer, by binding.",
            ["binding"],
            registry=self.registry,
            buckets=_BUCKETS,
        )
        self.streams = Gauge(
            "a2a_http_open_streams", "SSE streams open now, by binding.", ["binding"], registry=self.registry
        )
        self.grpc_calls = Counter(
            "a2a_grpc_requests",
            "gRPC calls answered, by protocol version, method and status code.",
            ["version", "method", "code"],
            registry=self.registry,
        )
        self.grpc_duration = Histogram(
            "a2a_grpc_request_duration_seconds",
            "Time to the end of a unary gRPC call, by protocol version and method.",
            ["version", "method"],
            registry=self.registry,
            buckets=_BUCKETS,
        )

    def watch(self, collector: Collector) -> None:
        """Report what `collector` reads at each scrape (`metrics_live.Live`: the components' own counts)."""
        self.registry.register(collector)

    def router(self) -> APIRouter:
        """`GET /metrics`: this registry in the text exposition format."""
        router = APIRouter()

        @router.get(METRICS_PATH, include_in_schema=False)
        async def metrics() -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        return router


class RequestMetrics(HttpLayer):
    """ASGI layer counting every HTTP request by binding and status (outermost, so refusals count too)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        binding = binding_of(route_path(scope["path"]))
        started = time.perf_counter()
        code = 500
        stream = False

        async def counting_send(message: Message) -> None:
            nonlocal code, stream
            if message["type"] == "http.response.start":
                code = message["status"]
                stream = any(
                    k == b"content-type" and v.startswith(b"text/event-stream") for k, v in message["headers"]
                )
                if stream:
                    self.metrics.streams.labels(binding).inc()
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.requests.labels(binding, str(code)).inc()
            if stream:
                self.metrics.streams.labels(binding).dec()
            else:
                self.metrics.duration.labels(binding).observe(time.perf_counter() - started)
