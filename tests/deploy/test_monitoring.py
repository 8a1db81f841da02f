"""Dashboards: deploy/prometheus.yml is the rendered one and scrapes every replica service, Grafana's
provisioning points at it, and the dashboard's every expression names a metric a server really exports (read
from a /metrics scrape of the app in process), so the panels cannot drift from app/api/edge/metrics.py.
Prometheus itself reads the expressions in tests/cluster/test_prometheus.py."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from alembic import command
from alembic.config import Config

from app.main import create_app
from app.settings import Settings
from scripts import grafana_dashboard, prometheus_conf

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
GRAFANA = ROOT / "deploy" / "grafana"
METRIC = re.compile(r"\ba2a_[a-z0-9_]+\b")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _exprs(dashboard: dict) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["definition"])
    return out


@pytest.fixture(scope="module")
async def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """name -> type of every metric family the app's GET /metrics names (the app in process, on SQLite,
    started through its lifespan so the components' own counts are there too)."""
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('metrics') / 'a2a.db'}"
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url)
    await asyncio.to_thread(command.upgrade, cfg, "head")  # alembic's env.py runs its own event loop
    settings = Settings(database_url=url, redis_url=None, grpc_port=0, auth_mode="off", metrics_enabled=True)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
            text = (await client.get("/metrics")).text
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


# ---- Prometheus ----


def test_deploy_prometheus_conf_is_the_rendered_compose_conf():
    assert prometheus_conf.COMPOSE_CONF.read_text() == prometheus_conf.render_compose(), (
        "deploy/prometheus.yml is stale: run "
        "`.venv/bin/python -m scripts.prometheus_conf --compose > deploy/prometheus.yml`"
    )


def test_compose_prometheus_scrapes_every_replica_service():
    services = _compose()["services"]
    conf = yaml.safe_load(prometheus_conf.render_compose())
    (job, team) = conf["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (static,) = job["static_configs"]
    replicas = {name: svc for name, svc in services.items() if re.fullmatch(r"a2a-\d+", name)}
    assert sorted(static["targets"]) == sorted(
        f"{name}:{svc['environment']['PORT']}" for name, svc in replicas.items()
    )
    # The team profile's pools, by the alias nginx's team server reaches them by.
    (dns,) = team["dns_sd_configs"]
    assert dns["names"] == ["a2a-team"] and dns["port"] == 41242
    pools = [svc for svc in services.values() if "networks" in svc]
    assert pools and all("a2a-team" in svc["networks"]["default"]["aliases"] for svc in pools)

    prom = services["prometheus"]
    assert prom["profiles"] == ["monitoring"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom["volumes"]
    assert prom["ports"] == ["127.0.0.1:9090:9090"], "published on loopback only"


def test_prometheus_accepts_the_configs(tmp_path: Path):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.skip("promtool is not installed: `make test` installs prometheus (scripts/install-deb.sh)")
    compose = tmp_path / "compose.yml"
    compose.write_text(prometheus_conf.render_compose())
    local = prometheus_conf.write_local(tmp_path / "local", ["127.0.0.1:1", "127.0.0.1:2"], "1s")
    for conf in (compose, local):
        done = subprocess.run([promtool, "check", "config", str(conf)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


# ---- Grafana ----


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard():
    services = _compose()["services"]
    grafana = services["grafana"]
    assert grafana["profiles"] == ["monitoring"]
    assert grafana["ports"] == ["127.0.0.1:3000:3000"], "published on loopback only"
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if v.startswith("./"))
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboards_dir = mounts["./deploy/grafana/dashboards"]

    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"]
    assert source["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]

    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "a2a.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == dashboards_dir
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{grafana_dashboard.DASHBOARD.name}"


def test_dashboard_file_is_the_rendered_one():
    assert grafana_dashboard.DASHBOARD.read_text() == grafana_dashboard.render(), (
        "deploy/grafana/dashboards/a2a.json is stale: run "
        "`.venv/bin/python -m scripts.grafana_dashboard > deploy/grafana/dashboards/a2a.json`"
    )


def test_dashboard_panels_are_well_formed():
    dashboard = json.loads(grafana_dashboard.DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    titles = [p["title"] for p in panels if p["type"] != "row"]
    assert len(set(titles)) == len(titles)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    # What the issue asks for, by the metrics behind the panels.
    named = " ".join(_exprs(dashboard))
    for metric in (
        "a2a_http_requests_total",  # requests and errors by binding
        "a2a_tasks_ended_total",  # tasks by state
        "a2a_agent_runs",  # agents busy
        "a2a_http_open_streams",  # stream count
        "a2a_store_commit_duration_seconds_bucket",  # commit latency
        "a2a_push_outcomes_total",  # push outcomes
        "a2a_usage_tokens_total",  # tokens
        "a2a_usage_cost_usd_total",  # cost
    ):
        assert metric in named, metric


def test_every_metric_the_dashboard_names_is_exported(exported: dict[str, str]):
    dashboard = json.loads(grafana_dashboard.DASHBOARD.read_text())
    assert "a2a_http_requests_total" in exported and "a2a_usage_tokens_total" in exported, sorted(exported)
    unknown = set()
    for expr in _exprs(dashboard):
        for name in METRIC.findall(expr):
            family = name
            for suffix in HISTOGRAM_SERIES:
                if name.endswith(suffix) and exported.get(name.removesuffix(suffix)) == "histogram":
                    family = name.removesuffix(suffix)
            if family not in exported:
                unknown.add(name)
    assert not unknown, f"the dashboard names metrics no server exports: {sorted(unknown)}"


def test_the_check_sees_an_unknown_metric(exported: dict[str, str]):
    assert "a2a_http_requests" not in exported, "counters are exported with _total"
    assert exported.get("a2a_store_commit_duration_seconds") == "histogram"
