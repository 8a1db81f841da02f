"""Prometheus metrics at `GET /metrics` (text exposition format), one registry per app.

Two kinds, so a request pays almost nothing for them:
- counted as they happen, by an ASGI layer (`RequestMetrics`): HTTP requests per binding and status, the
  duration of every non-streaming answer, the SSE streams open now; gRPC calls by the gRPC binding
  (`grpc_server.py`) the same way;
- read when Prometheus scrapes (`_Live`): what the components already count for themselves as plain
  integers (tasks created and ended, the writer's commits, agent runs, webhook deliveries, the database
  pool, the tokens and cost of the usage reports recorded), so nothing on the send path touches a metric
  object.

Every figure is this replica's: sum them across replicas (a task is counted by the replica that held it).
Like `/healthz` the path needs no credential; `METRICS_ENABLED=false` removes it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from typing import Any

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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth_guard import CARD_PATHS, JSONRPC_PATHS
from .deps import Components
from .paths import route_path

METRICS_PATH = "/metrics"
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_OPS_PATHS = frozenset({"/healthz", "/readyz", METRICS_PATH})


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
    if path in _OPS_PATHS:
        return "ops"
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

    def watch(self, components: Callable[[], Components | None]) -> None:
        """Report what the running components count, read at each scrape."""
        self.registry.register(_Live(components))

    def router(self) -> APIRouter:
        """`GET /metrics`: this registry in the text exposition format."""
        router = APIRouter()

        @router.get(METRICS_PATH, include_in_schema=False)
        async def metrics() -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        return router


class RequestMetrics:
    """ASGI layer counting every HTTP request by binding and status (outermost, so refusals count too)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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


class _Live(Collector):
    """What the components count for themselves, as metrics, read at scrape time."""

    def __init__(self, components: Callable[[], Components | None]) -> None:
        self._components = components

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        c = self._components()
        if c is None:
            return
        info = GaugeMetricFamily("a2a_replica_info", "This replica (always 1).", labels=["replica"])
        info.add_metric([c.settings.replica_id], 1)
        yield info
        every = list(c.roles.values()) or [c]
        created = sum(r.tasks.created_total for r in every)
        yield CounterMetricFamily("a2a_tasks_created", "Tasks created here.", value=created)
        ended = CounterMetricFamily(
            "a2a_tasks_ended", "Tasks that ended here, by final state.", labels=["state"]
        )
        for state, n in sorted(sum((r.tasks.ended_total for r in every), collections.Counter()).items()):
            ended.add_metric([state], n)
        yield ended
        held = sum(r.tasks.held for r in every)
        yield GaugeMetricFamily(
            "a2a_tasks_held", "Unfinished tasks this replica holds the lease of.", value=held
        )
        runs = GaugeMetricFamily("a2a_agent_runs", "Agent runs in progress here, by role.", labels=["role"])
        slots = GaugeMetricFamily(
            "a2a_agent_slots", "Agent runs allowed at once here, by role.", labels=["role"]
        )
        for r in every:
            runs.add_metric([r.role], r.runner.running)
            slots.add_metric([r.role], r.runner.slots)
        yield runs
        yield slots
        tokens = CounterMetricFamily(
            "a2a_usage_tokens",
            "Tokens of the agent runs' usage recorded here, by role, model and kind (input: uncached prompt,"
            " output, cache_read, cache_write).",
            labels=["role", "model", "kind"],
        )
        cost = CounterMetricFamily(
            "a2a_usage_cost_usd",
            "Cost in USD of the agent runs' usage recorded here (as reported, or from the price table), by"
            " role and model.",
            labels=["role", "model"],
        )
        for r in every:
            for (model, kind), n in sorted(r.tasks.tokens_total.items()):
                tokens.add_metric([r.tasks.role_name, model, kind], n)
            for model, usd in sorted(r.tasks.cost_total.items()):
                cost.add_metric([r.tasks.role_name, model], usd)
        yield tokens
        yield cost
        yield CounterMetricFamily("a2a_store_commits", "Group commits of the writer.", value=c.writer.commits)
        yield CounterMetricFamily(
            "a2a_store_writes", "Writes committed (many per commit).", value=c.writer.writes
        )
        yield GaugeMetricFamily(
            "a2a_store_pending_writes", "Writes waiting to commit.", value=c.writer.pending
        )
        pool: Any = c.engine.pool
        if hasattr(pool, "checkedout"):
            yield GaugeMetricFamily(
                "a2a_db_connections_in_use", "Pooled connections in use.", value=pool.checkedout()
            )
        push = c.deliverer.stats()
        yield CounterMetricFamily("a2a_push_attempts", "Webhook calls made here.", value=push["attempts"])
        outcomes = CounterMetricFamily(
            "a2a_push_outcomes",
            "Webhook notifications by outcome: delivered, retried (to be tried again), failed (given up),"
            " refused (the SSRF guard).",
            labels=["outcome"],
        )
        for outcome in ("delivered", "retried", "failed", "refused"):
            outcomes.add_metric([outcome], push[outcome])
        yield outcomes
        yield GaugeMetricFamily(
            "a2a_push_in_flight", "Webhooks being delivered to now.", value=push["inFlight"]
        )
        if c.retention is not None:
            yield from _retention(c.retention)


def _retention(r: Any) -> Iterator[Any]:
    """The retention pass's counts (`runner/retention.py`): only the replica holding the turn prunes."""
    yield CounterMetricFamily(
        "a2a_retention_pruned_tasks",
        "Ended tasks deleted here for being older than TASK_RETENTION_DAYS.",
        value=r.pruned_total,
    )
    rows = CounterMetricFamily(
        "a2a_retention_pruned_rows", "Rows deleted here by retention, by table.", labels=["table"]
    )
    for table, n in sorted(r.rows_total.items()):
        rows.add_metric([table], n)
    yield rows
    yield CounterMetricFamily(
        "a2a_retention_expired_tasks",
        "Tasks canceled here for waiting for input or auth longer than INPUT_REQUIRED_TTL_S.",
        value=r.expired_total,
    )
    yield GaugeMetricFamily(
        "a2a_retention_last_pass_timestamp_seconds",
        "Unix time this replica last finished a retention pass (0: none yet; take the max across replicas).",
        value=r.last_pass_at or 0,
    )
