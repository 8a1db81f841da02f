"""The Grafana dashboard of the replicas' metrics (deploy/grafana/dashboards/a2a.json), written from here.

    .venv/bin/python -m scripts.grafana_dashboard > deploy/grafana/dashboards/a2a.json

docker compose's `grafana` service (profile `monitoring`) is provisioned with it and with the `prometheus`
service as its data source (deploy/grafana/provisioning/); it imports into any Grafana with a Prometheus
that scrapes the replicas (the data source is a variable). The tests check the file is this rendering, that
every metric an expression names is one a server exports (a real scrape) and that Prometheus accepts every
expression. Panels: traffic (requests and errors by binding, latency, gRPC, open streams), tasks and agents
(created and ended by state, held, agents busy by role), the store (commit latency, commits and writes,
pending writes, connections), push notifications (outcomes, in flight) and usage (tokens, cost).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "a2a.json"
UID = "a2a-overview"

DS = {"type": "prometheus", "uid": "${datasource}"}
S = 'instance=~"$instance"'
"""The replica filter every expression carries (the dashboard's `instance` variable)."""
RATE = "$__rate_interval"
JOBS = 'job=~"a2a.*"'
"""The scrape jobs of deploy/prometheus.yml (and a local cluster's): `a2a`, `a2a-team`."""
SERVER_ERRORS = 'code=~"5.."'
ERRORS = 'code=~"4..|5.."'


def _sel(extra: str = "") -> str:
    return "{" + (f"{extra}, " if extra else "") + S + "}"


def _rate(metric: str, extra: str = "") -> str:
    return f"rate({metric}{_sel(extra)}[{RATE}])"


def _quantiles(metric: str, by: str = "") -> list[tuple[str, str]]:
    """p50, p95 and p99 of a histogram (by a label, when given)."""
    group = f"le, {by}" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) ({_rate(metric + '_bucket')}))",
            f"{prefix}p{int(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    ]


class _Layout:
    """Panels placed left to right, top to bottom, on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = 0
        self.row_h = 0

    def _place(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def _add(self, panel: dict[str, Any], w: int, h: int) -> None:
        panel = {"id": len(self.panels) + 1, **panel, "gridPos": self._place(w, h)}
        self.panels.append(panel)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self._add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0

    def stat(self, title: str, expr: str, unit: str, description: str) -> None:
        panel = {
            "type": "stat",
            "title": title,
            "description": description,
            "datasource": DS,
            "fieldConfig": {"defaults": {"unit": unit, "decimals": 2}, "overrides": []},
            "options": {
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "value",
                "graphMode": "area",
                "textMode": "auto",
            },
            "targets": [{"refId": "A", "datasource": DS, "expr": expr, "instant": False}],
        }
        self._add(panel, 4, 4)

    def series(self, title: str, exprs: list[tuple[str, str]], unit: str, description: str) -> None:
        panel = {
            "type": "timeseries",
            "title": title,
            "description": description,
            "datasource": DS,
            "fieldConfig": {
                "defaults": {"unit": unit, "custom": {"fillOpacity": 10, "showPoints": "never"}},
                "overrides": [],
            },
            "options": {
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
                for i, (expr, legend) in enumerate(exprs)
            ],
        }
        self._add(panel, 12, 8)


def panels() -> list[dict[str, Any]]:
    g = _Layout()
    g.row("Overview")
    g.stat("Replicas up", f"sum(up{_sel(JOBS)})", "none", "Replicas answering Prometheus's last scrape.")
    g.stat(
        "Requests / s",
        f"sum({_rate('a2a_http_requests_total')})",
        "reqps",
        "HTTP answers per second, every binding.",
    )
    g.stat(
        "5xx ratio",
        f"sum({_rate('a2a_http_requests_total', SERVER_ERRORS)})"
        f" / clamp_min(sum({_rate('a2a_http_requests_total')}), 1e-9)",
        "percentunit",
        "Share of HTTP answers that were 5xx.",
    )
    g.stat("Open streams", f"sum(a2a_http_open_streams{_sel()})", "none", "SSE streams open now.")
    g.stat(
        "Agents busy",
        f"sum(a2a_agent_runs{_sel()}) / clamp_min(sum(a2a_agent_slots{_sel()}), 1)",
        "percentunit",
        "Agent runs now over the slots, every role.",
    )
    g.stat(
        "Cost in range",
        f"sum(increase(a2a_usage_cost_usd_total{_sel()}[$__range]))",
        "currencyUSD",
        "USD of the usage recorded in the dashboard's time range (reported or priced).",
    )

    g.row("Requests")
    g.series(
        "Requests by binding",
        [(f"sum by (binding) ({_rate('a2a_http_requests_total')})", "{{binding}}")],
        "reqps",
        "HTTP answers per second by binding (jsonrpc, rest_v10, rest_v03, tasks_alias, card, ops, other).",
    )
    g.series(
        "Errors by binding and status",
        [
            (
                f"sum by (binding, code) ({_rate('a2a_http_requests_total', ERRORS)})",
                "{{binding}} {{code}}",
            )
        ],
        "reqps",
        "4xx and 5xx answers per second (refusals before a route included: 401, 413, 429).",
    )
    g.series(
        "Latency by binding",
        _quantiles("a2a_http_request_duration_seconds", "binding"),
        "s",
        "Time to the end of each non-streaming answer.",
    )
    g.series(
        "gRPC calls by method and status",
        [
            (
                f"sum by (version, method, code) ({_rate('a2a_grpc_requests_total')})",
                "{{version}} {{method}} {{code}}",
            )
        ],
        "reqps",
        "gRPC calls per second by protocol version, RPC and status code.",
    )
    g.series(
        "Open streams by binding",
        [(f"sum by (binding) (a2a_http_open_streams{_sel()})", "{{binding}}")],
        "none",
        "SSE streams open now.",
    )

    g.row("Tasks and agents")
    g.series(
        "Tasks created and ended by state",
        [
            (f"sum({_rate('a2a_tasks_created_total')})", "created"),
            (f"sum by (state) ({_rate('a2a_tasks_ended_total')})", "ended {{state}}"),
        ],
        "ops",
        "Tasks per second created, and ended by final state (completed, failed, canceled, rejected).",
    )
    g.series(
        "Unfinished tasks held, by replica",
        [(f"sum by (instance) (a2a_tasks_held{_sel()})", "{{instance}}")],
        "none",
        "Tasks not ended whose lease a replica holds (working or waiting for input).",
    )
    g.series(
        "Agents busy by role",
        [
            (f"sum by (role) (a2a_agent_runs{_sel()})", "{{role}} running"),
            (f"sum by (role) (a2a_agent_slots{_sel()})", "{{role}} slots"),
        ],
        "none",
        "Agent runs now and the slots for them, by role.",
    )

    g.row("Store")
    g.series(
        "Commit latency",
        _quantiles("a2a_store_commit_duration_seconds"),
        "s",
        "Time of each group commit, from taking a connection to the commit.",
    )
    g.series(
        "Commits and writes",
        [
            (f"sum({_rate('a2a_store_commits_total')})", "commits"),
            (f"sum({_rate('a2a_store_writes_total')})", "writes"),
        ],
        "ops",
        "Group commits per second and the writes they carried (writes per commit shows the batching).",
    )
    g.series(
        "Pending writes and connections in use",
        [
            (f"sum by (instance) (a2a_store_pending_writes{_sel()})", "pending {{instance}}"),
            (f"sum by (instance) (a2a_db_connections_in_use{_sel()})", "connections {{instance}}"),
        ],
        "none",
        "Writes waiting for the next commit, and pooled database connections checked out.",
    )

    g.row("Push notifications")
    g.series(
        "Push outcomes",
        [
            (f"sum by (outcome) ({_rate('a2a_push_outcomes_total')})", "{{outcome}}"),
            (f"sum({_rate('a2a_push_attempts_total')})", "attempts"),
        ],
        "ops",
        "Webhook calls per second, and notifications delivered, retried, failed (given up), refused (SSRF).",
    )
    g.series(
        "Webhooks in flight",
        [(f"sum(a2a_push_in_flight{_sel()})", "in flight")],
        "none",
        "Webhooks being delivered to now.",
    )

    g.row("Usage")
    g.series(
        "Tokens per minute by model and kind",
        [(f"60 * sum by (model, kind) ({_rate('a2a_usage_tokens_total')})", "{{model}} {{kind}}")],
        "none",
        "Tokens of the usage recorded: input (uncached prompt), output, cache_read, cache_write.",
    )
    g.series(
        "Cost per hour by role and model",
        [(f"3600 * sum by (role, model) ({_rate('a2a_usage_cost_usd_total')})", "{{role}} {{model}}")],
        "currencyUSD",
        "USD per hour of the usage recorded whose cost is known.",
    )
    return g.panels


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "A2A server",
        "description": "Every replica's /metrics (docs/operations.md, Metrics). Written by "
        "scripts/grafana_dashboard.py.",
        "tags": ["a2a"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "hide": 0,
                    "refresh": 1,
                },
                {
                    "name": "instance",
                    "label": "Replica",
                    "type": "query",
                    "datasource": DS,
                    "definition": "label_values(a2a_replica_info, instance)",
                    "query": {"query": "label_values(a2a_replica_info, instance)", "refId": "instance"},
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"selected": True, "text": "All", "value": "$__all"},
                    "refresh": 2,
                    "sort": 1,
                    "hide": 0,
                },
            ]
        },
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
