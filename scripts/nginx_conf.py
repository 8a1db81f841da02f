"""The nginx config in front of the replicas, rendered from one template for compose and for local runs.

`deploy/nginx.conf` (docker compose) is this module's compose rendering, checked by the tests:

    .venv/bin/python -m scripts.nginx_conf --compose > deploy/nginx.conf

Local runs (`make cluster`, the tests' Cluster) render it with loopback upstreams and every path (pid, logs,
temp files) under a private prefix directory, and start `nginx -p PREFIX -c PREFIX/nginx.conf -e ...`.

The compose rendering also serves the `team` profile's deployment (docker-compose.yml: the `reviewers` and
`implementers` pools, both under the network alias `a2a-team`) on ports of its own, 8081 and 50052 for gRPC.
Those replicas exist only with `--profile team`, so their name is resolved per request through Docker's DNS
rather than in an `upstream` block, which nginx would refuse to start with when the name does not resolve.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_CONF = ROOT / "deploy" / "nginx.conf"
COMPOSE_UPSTREAMS = ("a2a-1:41242", "a2a-2:41242", "a2a-3:41242")
COMPOSE_LISTEN = "8080"
COMPOSE_GRPC_UPSTREAMS = ("a2a-1:50051", "a2a-2:50051", "a2a-3:50051")
COMPOSE_GRPC_LISTEN = "50051"


@dataclass(frozen=True)
class TeamProxy:
    """A second deployment behind the same nginx, on its own ports, its replicas found by one name."""

    host: str
    """A name resolved per request (every address it has is a replica), or an address."""
    port: int
    """The replicas' HTTP port."""
    listen: str
    grpc_port: int = 0
    """The replicas' gRPC port (0: no gRPC server for the team)."""
    grpc_listen: str | None = None
    resolver: str | None = None
    """The DNS server that resolves `host` (None: `host` is an address)."""


# docker compose --profile team (docker-compose.yml): the alias both pools carry, Docker's embedded DNS.
COMPOSE_TEAM = TeamProxy(
    host="a2a-team",
    port=41242,
    listen="8081",
    grpc_port=50051,
    grpc_listen="50052",
    resolver="127.0.0.11",
)

_TEMPLATE = """\
# {header}
# SSE-safe reverse proxy in front of the A2A replicas. Rendered by scripts/nginx_conf.py: edit it there.
{main}
events {{
    worker_connections 4096;
}}

http {{
    default_type application/octet-stream;
    server_tokens off;
    # Event streams must not be compressed (gzip would hold events back until its buffer fills).
    gzip off;
    # Above CHECKPOINT_MAX_MB (64) and its manifest: a remote worker's checkpoint upload passes here.
    client_max_body_size 72m;
{http}
    upstream a2a {{
        # Passive health: one failure (refused, reset, timeout, 502) takes a replica out for 2 s, so a
        # killed replica costs at most one quick retry per worker. Not a 503: that is every replica's answer
        # while the database is away, and counted as failures it took all of them out in turn, so nginx
        # answered 502 (no live upstream) instead of the replicas' 503 with Retry-After.
{servers}
        keepalive 32;
        keepalive_timeout 60s;
    }}

    server {{
        listen {listen};

        location / {{
            proxy_pass http://a2a;
{proxy}
        }}
    }}
{grpc}{team}}}
"""

_PROXY = """
            # HTTP/1.1 with keep-alive to the replicas; no hop-by-hop Connection header forwarded.
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            # The SSE resume cursor (tasks/resubscribe).
            proxy_set_header Last-Event-ID $http_last_event_id;

            # Server-sent events: every event goes out as soon as the replica writes it.
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            proxy_connect_timeout 2s;

            # Failover to another replica. nginx never retries a POST once it was sent to a replica
            # (that would need `non_idempotent`, deliberately absent): a JSON-RPC call is only retried
            # when the replica refused the connection or failed before the request went out.
            proxy_next_upstream error timeout http_502;
            proxy_next_upstream_timeout 10s;"""

_GRPC = """
    upstream a2a_grpc {{
{servers}
        keepalive 32;
    }}

    # gRPC (both A2A services): HTTP/2 in and out; each call goes to any replica, which forwards to the
    # task's holder as for HTTP.
    server {{
        listen {listen} http2;

        location / {{
            grpc_pass grpc://a2a_grpc;
            grpc_set_header X-Real-IP $remote_addr;
            grpc_read_timeout 1h;
            grpc_send_timeout 1h;
            grpc_connect_timeout 2s;
            grpc_next_upstream error timeout;
            grpc_next_upstream_timeout 10s;
        }}
    }}
"""

_TEAM = """
    # The team deployment (docker compose --profile team) on ports of its own. Its replicas are every
    # address the name below has, looked up per request (the resolver's answer kept 5 s): nginx starts
    # without them (these ports then answer 502), and a pool scaled or restarted is picked up without a
    # reload. A failed connection moves on to the name's next address, as the upstream above does to its
    # next replica (with no keep-alive pool: nginx keeps one only for an upstream block).
{resolver}    server {{
        listen {listen};

        location / {{
            set $a2a_team {host};
            proxy_pass http://$a2a_team:{port};
{proxy}
        }}
    }}
{grpc}"""

_TEAM_GRPC = """
    server {{
        listen {listen} http2;

        location / {{
            set $a2a_team {host};
            grpc_pass grpc://$a2a_team:{port};
            grpc_set_header X-Real-IP $remote_addr;
            grpc_read_timeout 1h;
            grpc_send_timeout 1h;
            grpc_connect_timeout 2s;
            grpc_next_upstream error timeout;
            grpc_next_upstream_timeout 10s;
        }}
    }}
"""


def render(
    upstreams: Sequence[str],
    listen: str,
    prefix: Path | None = None,
    *,
    worker_user: str | None = None,
    grpc_upstreams: Sequence[str] = (),
    grpc_listen: str | None = None,
    team: TeamProxy | None = None,
) -> str:
    """The nginx.conf text for these `host:port` upstreams (and, with `grpc_listen`, a gRPC server in
    front of the replicas' `grpc_upstreams`; with `team`, a second deployment's servers).

    `prefix` None renders for the nginx container (logs to stdout/stderr, the image's own pid and temp
    paths); a prefix directory renders for a local process with the pid, logs and temp files under it.
    `worker_user` sets the `user` directive (only meaningful when nginx starts as root).
    """
    if not upstreams:
        raise ValueError("at least one upstream is needed")
    servers = _servers(upstreams)
    grpc = _GRPC.format(servers=_servers(grpc_upstreams), listen=grpc_listen) if grpc_listen else ""
    if prefix is None:
        header = "docker compose: mounted as /etc/nginx/nginx.conf in the nginx service."
        main = "worker_processes auto;\nerror_log /dev/stderr warn;\n"
        http = "    access_log /dev/stdout;\n"
    else:
        header = "Local run: every file under this prefix, listening on loopback only."
        lines = []
        if worker_user:
            lines.append(f"user {worker_user};")
        lines += [
            "worker_processes 1;",
            f"pid {prefix / 'nginx.pid'};",
            f"error_log {prefix / 'error.log'} warn;",
        ]
        main = "\n".join(lines) + "\n"
        http = f"    access_log {prefix / 'access.log'};\n" + "".join(
            f"    {name}_temp_path {prefix / 'temp' / name};\n"
            for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
    return _TEMPLATE.format(
        header=header,
        main=main,
        http=http,
        servers=servers,
        listen=listen,
        proxy=_PROXY,
        grpc=grpc,
        team=_team(team) if team else "",
    )


def _team(team: TeamProxy) -> str:
    grpc = ""
    if team.grpc_listen:
        grpc = _TEAM_GRPC.format(listen=team.grpc_listen, host=team.host, port=team.grpc_port)
    resolver = ""
    if team.resolver:
        resolver = f"    resolver {team.resolver} valid=5s ipv6=off;\n    resolver_timeout 2s;\n\n"
    return _TEAM.format(
        host=team.host,
        resolver=resolver,
        listen=team.listen,
        port=team.port,
        proxy=_PROXY,
        grpc=grpc,
    )


def _servers(upstreams: Sequence[str]) -> str:
    return "\n".join(f"        server {u} max_fails=1 fail_timeout=2s;" for u in upstreams)


def render_compose() -> str:
    """The config docker compose mounts: the three replica services, listening on 8080 (and gRPC on 50051),
    and the `team` profile's replicas on 8081 (gRPC 50052)."""
    return render(
        COMPOSE_UPSTREAMS,
        COMPOSE_LISTEN,
        grpc_upstreams=COMPOSE_GRPC_UPSTREAMS,
        grpc_listen=COMPOSE_GRPC_LISTEN,
        team=COMPOSE_TEAM,
    )


def write_local(
    prefix: Path,
    upstreams: Sequence[str],
    port: int,
    grpc_upstreams: Sequence[str] = (),
    grpc_port: int = 0,
    team: TeamProxy | None = None,
) -> Path:
    """Write a loopback config (listening on 127.0.0.1:`port`, and for gRPC on `grpc_port` when set, and
    with `team` a second deployment's servers) under `prefix`; its path.

    As root, workers run as root too: the prefix usually sits in a private (0700) temp directory that the
    default `nobody` worker could not write request bodies into.
    """
    prefix = prefix.resolve()
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / "temp" / name).mkdir(parents=True, exist_ok=True)
    user = "root" if os.geteuid() == 0 else None
    conf = prefix / "nginx.conf"
    grpc_listen = f"127.0.0.1:{grpc_port}" if grpc_port else None
    conf.write_text(
        render(
            upstreams,
            f"127.0.0.1:{port}",
            prefix,
            worker_user=user,
            grpc_upstreams=grpc_upstreams,
            grpc_listen=grpc_listen,
            team=team,
        )
    )
    return conf


def nginx_command(prefix: Path, conf: Path) -> list[str]:
    """The foreground nginx command for a config written by `write_local`."""
    prefix = prefix.resolve()
    return [
        nginx_binary(),
        "-p",
        f"{prefix}/",
        "-c",
        str(conf),
        "-e",
        str(prefix / "error.log"),
        "-g",
        "daemon off;",
    ]


def nginx_binary() -> str:
    """Path of the nginx executable (Debian puts it in /usr/sbin, often not on a user's PATH)."""
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/usr/local/sbin"]:
        path = Path(d or ".") / "nginx"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise FileNotFoundError("nginx is not installed: run scripts/install-deb.sh nginx nginx")


def main(argv: list[str] | None = None) -> None:
    """CLI: print the compose config, or a local one for given upstreams."""
    parser = argparse.ArgumentParser(prog="python -m scripts.nginx_conf", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compose", action="store_true", help="the docker compose config (deploy/nginx.conf)"
    )
    parser.add_argument("--upstream", action="append", default=[], help="host:port of a replica (repeat)")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="listen address of a local config")
    parser.add_argument(
        "--prefix", type=Path, help="directory for pid, logs and temp files of a local config"
    )
    args = parser.parse_args(argv)
    if args.compose:
        sys.stdout.write(render_compose())
    elif args.upstream and args.prefix:
        sys.stdout.write(render(args.upstream, args.listen, args.prefix.resolve()))
    else:
        parser.error("give --compose, or --upstream (one or more) with --prefix")


if __name__ == "__main__":
    main()
