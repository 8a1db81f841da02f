"""What `/metrics` reads from the running components when Prometheus scrapes (`Live`): what they already
count for themselves as plain integers (tasks created and ended, the writer's commits, agent runs, webhook
deliveries, the database pool, the usage recorded, the retention pass, the workspace sweep). Registered on
`metrics.Metrics` by `main.create_app`; the counters of requests and calls are in `metrics.py`."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ..deps import Components


class Live(Collector):
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
        info.add_metric([c.replica_id], 1)
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
                tokens.add_metric([r.tasks.parts.role_name, model, kind], n)
            for model, usd in sorted(r.tasks.cost_total.items()):
                cost.add_metric([r.tasks.parts.role_name, model], usd)
        yield tokens
        yield cost
        yield CounterMetricFamily("a2a_store_commits", "Group commits of the writer.", value=c.writer.commits)
        yield CounterMetricFamily(
            "a2a_store_writes", "Writes committed (many per commit).", value=c.writer.writes
        )
        yield GaugeMetricFamily(
            "a2a_store_pending_writes", "Writes waiting to commit.", value=c.writer.pending
        )
        yield _commit_times(c)
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
        if c.sweep is not None:
            yield from _sweep(c.sweep)


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


def _sweep(s: Any) -> Iterator[Any]:
    """What this process's workspace sweep measured last (`agents/cli/sweep.py`): its own disk's, never
    walked at scrape time."""
    last = s.last
    yield GaugeMetricFamily(
        "a2a_workspace_bytes",
        "Disk used by the context workspaces (checkouts) on this process's disk, as the last sweep measured.",
        value=last.workspace_bytes if last else 0,
    )
    yield GaugeMetricFamily(
        "a2a_workspaces",
        "Context workspaces on this process's disk at the last sweep (unmarked ones too).",
        value=last.workspaces if last else 0,
    )
    yield GaugeMetricFamily(
        "a2a_repo_cache_bytes",
        "Disk used by the repository mirrors (REPO_CACHE_ROOT) here, as the last sweep measured.",
        value=last.cache_bytes if last else 0,
    )
    yield CounterMetricFamily(
        "a2a_workspaces_removed",
        "Workspaces of ended contexts the sweep removed here.",
        value=s.removed_total,
    )
    yield CounterMetricFamily(
        "a2a_workspaces_freed_bytes", "Disk the removed workspaces held.", value=s.freed_total
    )
    yield GaugeMetricFamily(
        "a2a_workspace_sweep_last_timestamp_seconds",
        "Unix time this process last finished a workspace sweep (0: none yet).",
        value=s.last_at or 0,
    )


def _commit_times(c: Components) -> HistogramMetricFamily:
    """The writer's commit times as a histogram (its bucket counts made cumulative)."""
    times = c.writer.commit_times
    buckets, total = [], 0
    for bound, n in zip((*times.bounds, float("inf")), times.counts, strict=True):
        total += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
    return HistogramMetricFamily(
        "a2a_store_commit_duration_seconds",
        "Time of each group commit of the writer (from taking a connection to the commit).",
        buckets=buckets,
        sum_value=times.seconds,
    )
