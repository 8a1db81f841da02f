"""The Prometheus config that scrapes every replica's /metrics, rendered for compose and for local runs.

`deploy/prometheus.yml` (docker compose, profile `monitoring`) is this module's compose rendering, checked by
the tests:

    .venv/bin/python -m scripts.prometheus_conf --compose > deploy/prometheus.yml

Local runs (`make cluster`, the tests' Cluster with `prometheus=True`) render it for the replicas' loopback
ports and run `prometheus` (Debian's package, scripts/install-deb.sh) on 127.0.0.1 with its data under the
cluster's folder. Only the standard library is used (the YAML is written as text).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_CONF = ROOT / "deploy" / "prometheus.yml"
COMPOSE_TARGETS = ("a2a-1:41242", "a2a-2:41242", "a2a-3:41242")
COMPOSE_TEAM = ("a2a-team", 41242)
"""The team deployment's replicas (profile `team`): every address of this name, found through Docker's DNS."""
COMPOSE_INTERVAL = "15s"
JOB = "a2a"

_TEMPLATE = """\
# {header}
# Every replica's GET /metrics (docs/operations.md "Metrics"). Rendered by scripts/prometheus_conf.py.
global:
  scrape_interval: {interval}
  evaluation_interval: {interval}

scrape_configs:
  - job_name: {job}
    metrics_path: /metrics
    static_configs:
      - targets: [{targets}]
{team}"""

_TEAM = """
  # The team deployment (docker compose --profile team): its pools' replicas are every address of one name.
  - job_name: {job}-team
    metrics_path: /metrics
    dns_sd_configs:
      - names: [{name}]
        type: A
        port: {port}
        refresh_interval: 15s
"""


def render(
    targets: Sequence[str],
    interval: str = COMPOSE_INTERVAL,
    *,
    header: str = "Local run: the replicas on loopback.",
    team: tuple[str, int] | None = None,
) -> str:
    """The prometheus.yml text scraping these `host:port` targets every `interval` (and with `team` the
    addresses of a name, on a port)."""
    if not targets:
        raise ValueError("at least one target is needed")
    team_text = _TEAM.format(job=JOB, name=_quote(team[0]), port=team[1]) if team else ""
    return _TEMPLATE.format(
        header=header,
        interval=interval,
        job=JOB,
        targets=", ".join(_quote(t) for t in targets),
        team=team_text,
    )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_compose() -> str:
    """The config compose mounts: the three replica services, and the team profile's pools."""
    return render(
        COMPOSE_TARGETS,
        COMPOSE_INTERVAL,
        header="docker compose (profile monitoring): mounted as /etc/prometheus/prometheus.yml.",
        team=COMPOSE_TEAM,
    )


def write_local(prefix: Path, targets: Sequence[str], interval: str = "5s") -> Path:
    """Write a loopback config under `prefix` (the data folder beside it); its path."""
    prefix = prefix.resolve()
    (prefix / "data").mkdir(parents=True, exist_ok=True)
    conf = prefix / "prometheus.yml"
    conf.write_text(render(targets, interval))
    return conf


def prometheus_command(prefix: Path, conf: Path, port: int) -> list[str]:
    """The foreground prometheus command for a config written by `write_local`, on 127.0.0.1:`port`."""
    prefix = prefix.resolve()
    return [
        prometheus_binary(),
        f"--config.file={conf}",
        f"--storage.tsdb.path={prefix / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]


def prometheus_binary() -> str:
    """Path of the prometheus executable."""
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]:
        path = Path(d or ".") / "prometheus"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise FileNotFoundError("prometheus is not installed: run scripts/install-deb.sh prometheus prometheus")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.prometheus_conf", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--compose", action="store_true", help="the docker compose config")
    parser.add_argument("--target", action="append", default=[], help="host:port of a replica (repeat)")
    parser.add_argument("--interval", default="5s", help="scrape interval of a local config")
    args = parser.parse_args(argv)
    if args.compose:
        sys.stdout.write(render_compose())
    elif args.target:
        sys.stdout.write(render(args.target, args.interval))
    else:
        parser.error("give --compose, or --target (one or more)")


if __name__ == "__main__":
    main()
