"""`make cluster` with Prometheus: `python -m scripts.cluster run` as `make cluster` runs it, its Prometheus
read through its HTTP API: every replica scraped, what each one did counted, and every expression of the
Grafana dashboard (deploy/grafana/dashboards/a2a.json) accepted; then `cluster stop` ends it all."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scripts.cluster import port_in_use
from scripts.grafana_dashboard import DASHBOARD
from scripts.ready import log_tail
from tests.conftest import _fresh_pg_database
from tests.support.rpc import send
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
START_S = 240.0
"""How long `cluster run` may take to be ready: a fresh database migrated, two replicas (each allowed 60 s by
scripts/cluster.py), nginx and Prometheus, on a busy machine. A wait on its ready line."""


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


def _ports() -> tuple[int, int, int]:
    """nginx's, the first replica's (the second is the next one) and Prometheus's, all free now."""
    while True:
        nginx, base, after = free_port(), free_port(), free_port()
        if after == base + 1 and not port_in_use(after):
            return nginx, base, free_port()


def _spawn(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    out = subprocess.PIPE
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _stop(proc: subprocess.Popen[str], nginx_port: int, env: dict[str, str]) -> None:
    """`make cluster-stop`'s command; the supervisor must then exit, having stopped what it started."""
    stop = [sys.executable, "-m", "scripts.cluster", "stop", "--port", str(nginx_port)]
    subprocess.run(stop, cwd=ROOT, env=env, capture_output=True, timeout=120)
    try:
        proc.wait(60)  # its own stop gives each process it started up to 15 s
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        raise


def _read_until_ready(proc: subprocess.Popen[str], lines: list[str]) -> None:
    """Read the supervisor's lines into `lines` up to its 'Ctrl-C' line (it is then ready); fails with them
    if it exits."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if "cluster: Ctrl-C" in line:
            return
    raise AssertionError("cluster run exited:\n" + "\n".join(lines))


def _logs(workdir: Path) -> str:
    """The tails of the replicas' and Prometheus's logs, for a failure message."""
    paths = [*sorted(workdir.glob("replica-*.log")), workdir / "prometheus" / "prometheus.log"]
    return "\n".join(f"{p}:\n{log_tail(p)}" for p in paths)


async def test_make_cluster_runs_prometheus_scraping_every_replica(tmp_path: Path):
    pg = os.environ.get("TEST_POSTGRES_URL")
    redis = os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both and sets them")
    nginx_port, base, prom_port = _ports()
    env = {
        **os.environ,
        "CLUSTER_DIR": str(tmp_path),
        "AUTH_MODE": "off",
        "AGENT_ADAPTER": "scripted",
        "LOG_LEVEL": "warning",
    }
    cmd = [sys.executable, "-m", "scripts.cluster", "run", "--replicas", "2", "--port", str(nginx_port)]
    cmd += ["--replica-base-port", str(base), "--prometheus-port", str(prom_port), "--scrape-interval", "1s"]
    cmd += ["--database-url", await _fresh_pg_database(pg), "--redis-url", redis]
    proc = await asyncio.to_thread(_spawn, cmd, env)
    try:
        lines: list[str] = []
        try:
            await asyncio.wait_for(asyncio.to_thread(_read_until_ready, proc, lines), START_S)
        except TimeoutError:
            said = "\n".join(lines)
            raise AssertionError(
                f"cluster run not ready after {START_S:.0f}s:\n{said}\n{_logs(tmp_path)}"
            ) from None
        replicas = dict(re.findall(r"^  (a2a-\d+)  http://(127\.0\.0\.1:\d+) ", "\n".join(lines), re.M))
        assert sorted(replicas.values()) == [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"], lines
        assert any(f"prometheus  http://127.0.0.1:{prom_port}" in line for line in lines), lines
        await _check_prometheus(f"http://127.0.0.1:{prom_port}", {v: k for k, v in replicas.items()})
    finally:
        await asyncio.to_thread(_stop, proc, nginx_port, env)
    assert not any(port_in_use(p) for p in (nginx_port, base, base + 1, prom_port)), "cluster stop left some"


async def _check_prometheus(url: str, replicas: dict[str, str]) -> None:
    """`replicas`: instance (host:port) -> replica id."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as prom:

        async def all_up() -> list[dict] | None:
            targets = (await _api(prom, "/api/v1/targets", state="active"))["activeTargets"]
            up = [t for t in targets if t["health"] == "up" and t["labels"]["job"] == "a2a"]
            return up if {t["labels"]["instance"] for t in up} == set(replicas) else None

        targets = await _until("every replica scraped", all_up)
        assert {t["scrapeUrl"] for t in targets} == {f"http://{i}/metrics" for i in replicas}

        # Work on each replica (directly: the receiving replica runs a task), with usage to count.
        for instance in replicas:
            async with httpx.AsyncClient(base_url=f"http://{instance}", timeout=30) as own:
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

        async def output_tokens() -> float | None:
            query = 'sum(a2a_usage_tokens_total{kind="output"})'
            result = (await _api(prom, "/api/v1/query", query=query))["result"]
            value = float(result[0]["value"][1]) if result else 0.0
            return value if value >= 2 * 3 * 20 else None

        assert await _until("the usage reports' tokens", output_tokens) == 2 * 3 * 20

        # Every expression of the dashboard parses and runs (Grafana's variables given values).
        dashboard = json.loads(DASHBOARD.read_text())
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$__rate_interval", "15s").replace("$__range", "5m")
                await _api(prom, "/api/v1/query", query=expr.replace("$instance", ".*"))
        result = (await _api(prom, "/api/v1/query", query='sum(up{job=~"a2a.*"})'))["result"]
        assert float(result[0]["value"][1]) == len(replicas)
