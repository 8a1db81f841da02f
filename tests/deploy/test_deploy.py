"""Deployment files: deploy/nginx.conf is the rendered one, nginx accepts it, compose wires the topology."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from scripts.nginx_conf import COMPOSE_CONF, nginx_binary, render_compose, write_local

ROOT = Path(__file__).resolve().parents[2]

SSE_DIRECTIVES = [
    "proxy_buffering off;",
    "proxy_cache off;",
    "proxy_read_timeout 1h;",
    "proxy_http_version 1.1;",
    'proxy_set_header Connection "";',
    "proxy_set_header Last-Event-ID $http_last_event_id;",
    "proxy_next_upstream error timeout http_502;",
    "gzip off;",
    "keepalive 32;",
]


def _nginx() -> str:
    try:
        return nginx_binary()
    except FileNotFoundError:
        pytest.skip("nginx is not installed: `make test` installs it (scripts/install-deb.sh)")


def _nginx_t(conf: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    cmd = [_nginx(), "-t", "-p", f"{prefix}/", "-c", str(conf), "-e", str(prefix / "error.log")]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_deploy_conf_is_the_rendered_compose_conf():
    assert COMPOSE_CONF.read_text() == render_compose(), (
        "deploy/nginx.conf is stale: run "
        "`.venv/bin/python -m scripts.nginx_conf --compose > deploy/nginx.conf`"
    )


@pytest.mark.parametrize("text", [render_compose(), None], ids=["compose", "local"])
def test_sse_safe_failover_settings(text: str | None, tmp_path: Path):
    if text is None:
        text = write_local(tmp_path, ["127.0.0.1:1", "127.0.0.1:2"], 3).read_text()
        assert "listen 127.0.0.1:3;" in text
        assert all(
            str(tmp_path) in line
            for line in text.splitlines()
            if re.match(r"\s*(pid|\w+_log|\w+_path) ", line)
        )
    for directive in SSE_DIRECTIVES:
        assert directive in text, directive
    directives = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert "non_idempotent" not in directives, "a POST must never be retried after it reached a replica"
    servers = re.findall(r"^\s*server (\S+) (.*);$", text, re.M)
    assert len(servers) >= 2 and all(opts == "max_fails=1 fail_timeout=2s" for _, opts in servers)


def test_nginx_accepts_local_and_compose_conf(tmp_path: Path):
    local = write_local(tmp_path / "local", ["127.0.0.1:9", "127.0.0.1:10"], 11, ["127.0.0.1:12"], 13)
    done = _nginx_t(local, tmp_path / "local")
    assert done.returncode == 0, done.stderr

    # The compose file with its service names pointed at loopback (they only resolve inside compose).
    prefix = tmp_path / "compose"
    prefix.mkdir()
    text = re.sub(r"\ba2a-\d+:", "127.0.0.1:", render_compose())
    text = text.replace("worker_processes auto;", f"worker_processes auto;\npid {prefix}/nginx.pid;")
    conf = prefix / "nginx.conf"
    conf.write_text(text)
    done = _nginx_t(conf, prefix)
    assert done.returncode == 0, done.stderr


def test_compose_topology():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    replicas = [f"a2a-{i}" for i in (1, 2, 3)]
    assert {"postgres", "redis", "migrate", "nginx", *replicas} <= set(services)
    ids = set()
    for name in replicas:
        svc = services[name]
        env = svc["environment"]
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert env["DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert env["PUBLIC_URL"].endswith(":8080}") or env["PUBLIC_URL"].endswith(":8080")
        ids.add(env["REPLICA_ID"])
        assert "/readyz" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert "ports" not in svc, "replicas are reached through nginx only"
    assert ids == set(replicas)
    nginx = services["nginx"]
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]
    assert any(str(p).endswith("8080:8080") for p in nginx["ports"])
    # gRPC: nginx's 50051 (HTTP/2, grpc_pass) in front of each replica's, and the card says so.
    assert any(str(p).endswith("50051:50051") for p in nginx["ports"])
    assert "listen 50051 http2;" in render_compose() and "grpc_pass grpc://a2a_grpc;" in render_compose()
    env = services["a2a-1"]["environment"]
    assert env["GRPC_PORT"] == "50051" and "localhost:50051" in env["GRPC_PUBLIC_ADDRESS"]
    assert all(nginx["depends_on"][r]["condition"] == "service_healthy" for r in replicas)


def test_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    scripts = [str(ROOT / "scripts" / name) for name in ("redis.sh", "install-deb.sh")]
    done = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
