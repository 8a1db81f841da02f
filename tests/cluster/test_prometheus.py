"""Prometheus in a cluster (what `make cluster` runs): it scrapes every replica, sees what each one did, and
accepts every expression of the Grafana dashboard (deploy/grafana/dashboards/a2a.json)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from scripts.grafana_dashboard import DASHBOARD
from tests.conftest import ClusterFactory
from tests.support.rpc import send

WAIT_S = 30.0


async def _api(client: httpx.AsyncClient, path: str, **params: str) -> Any:
    resp = await client.get(path, params=params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "success", body
    return body["data"]


async def _until(what: str, check) -> Any:
    """Poll `check()` (async, returning a truthy value when done) until it holds; no fixed sleeps."""
    deadline = time.monotonic() + WAIT_S
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not within {WAIT_S}s; last: {last}")


async def test_prometheus_scrapes_every_replica(cluster_factory: ClusterFactory):
    cluster = await cluster_factory(2, prometheus=True)
    replicas = {f"127.0.0.1:{r.port}": r.replica_id for r in cluster.replicas}
    async with httpx.AsyncClient(base_url=cluster.prometheus_url, timeout=10) as prom:

        async def all_up() -> list[dict] | None:
            targets = (await _api(prom, "/api/v1/targets", state="active"))["activeTargets"]
            up = [t for t in targets if t["health"] == "up" and t["labels"]["job"] == "a2a"]
            return up if {t["labels"]["instance"] for t in up} == set(replicas) else None

        targets = await _until("every replica scraped", all_up)
        assert {t["scrapeUrl"] for t in targets} == {f"http://{i}/metrics" for i in replicas}

        # Work on each replica (directly: the receiving replica runs a task), with usage to count.
        for url in cluster.urls:
            async with httpx.AsyncClient(base_url=url, timeout=30) as own:
                for n in range(3):
                    task = await send(own, f"say:{n};usage:claude-sonnet-4-5:100:20")
                    assert task["status"]["state"] == "completed"

        async def counted() -> dict[str, float] | None:
            result = (await _api(prom, "/api/v1/query", query="a2a_tasks_created_total"))["result"]
            seen = {r["metric"]["instance"]: float(r["value"][1]) for r in result}
            return seen if set(seen) == set(replicas) and all(v >= 3 for v in seen.values()) else None

        await _until("each replica's tasks in Prometheus", counted)
        info = (await _api(prom, "/api/v1/query", query="a2a_replica_info"))["result"]
        assert {r["metric"]["instance"]: r["metric"]["replica"] for r in info} == replicas

        async def tokens() -> float | None:
            query = 'sum(a2a_usage_tokens_total{kind="output"})'
            result = (await _api(prom, "/api/v1/query", query=query))["result"]
            return float(result[0]["value"][1]) if result and float(result[0]["value"][1]) >= 120 else None

        assert await _until("the usage reports' tokens", tokens) == 2 * 3 * 20

        # Every expression of the dashboard parses and runs (Grafana's variables given values).
        dashboard = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        for expr in exprs:
            query = (
                expr.replace("$__rate_interval", "15s").replace("$__range", "5m").replace("$instance", ".*")
            )
            await _api(prom, "/api/v1/query", query=query)
        result = (await _api(prom, "/api/v1/query", query='sum(up{job=~"a2a.*"})'))["result"]
        assert float(result[0]["value"][1]) == len(replicas)
