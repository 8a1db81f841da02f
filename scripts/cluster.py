"""The scaled-out topology as plain processes on loopback: PostgreSQL, Redis, N replicas, nginx in front, and
Prometheus scraping every replica.

    make cluster                                # or: .venv/bin/python -m scripts.cluster
    make cluster CLUSTER_REPLICAS=5 CLUSTER_PORT=9090
    make cluster-stop                           # stops a cluster started elsewhere (e.g. in the background)

`run` starts PostgreSQL (scripts/pg.sh, database `a2a_cluster`) and Redis (scripts/redis.sh) unless URLs are
given, applies the migrations, starts the replicas on their own ports with distinct REPLICA_IDs and the
nginx URL as PUBLIC_URL, then nginx and Prometheus (scripts/prometheus_conf.py; `--no-prometheus` leaves it
out), waits until everything is ready and prints the URLs and PIDs. Ctrl-C or SIGTERM stops everything it
started (PostgreSQL and Redis only if they were not already running).

`Cluster` is the reusable part (tests/support/cluster.py builds on it). Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scripts import prometheus_conf
from scripts.nginx_conf import nginx_command, write_local
from scripts.ready import READY_TIMEOUT_S, log_tail, spawn, wait_ready

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SCRIPTS = ROOT / "scripts"

REDIS_BUS = True
"""Whether replicas get REDIS_URL (the shared Redis bus, leases' control messages). Off, each replica keeps
its in-process bus and Redis only runs beside them; CLUSTER_REDIS_BUS=1/0 overrides this default."""

STOP_TIMEOUT_S = 15.0


def redis_bus_default() -> bool:
    """REDIS_BUS, unless CLUSTER_REDIS_BUS says otherwise."""
    value = os.environ.get("CLUSTER_REDIS_BUS", "").strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    return REDIS_BUS


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _end(proc: subprocess.Popen[bytes] | None, sig: int, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Send `sig` and wait for the exit; SIGKILL after `timeout`. False when it took the SIGKILL."""
    if proc is None or proc.poll() is not None:
        return True
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


@dataclass
class Replica:
    """One `a2a-server serve` process of the cluster."""

    index: int
    replica_id: str
    port: int
    log_path: Path
    grpc_port: int = 0
    """Its gRPC port; 0: no gRPC."""
    server: Path | None = None
    """The `a2a-server` it runs (None: this checkout's); another release's, from its own folder (`cwd`)."""
    cwd: Path | None = None
    ready_path: str = "/readyz"
    """What says it is ready (a release whose /readyz wants its own head exactly: /healthz)."""
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """N replicas on loopback behind one nginx, sharing a database (and Redis, when the bus is on).

    PostgreSQL and Redis are given as URLs; the cluster owns only the replicas and nginx. Logs go to
    `workdir` (`replica-<n>.log`, `nginx/`).
    """

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        workdir: Path,
        replicas: int = 3,
        *,
        nginx_port: int | None = None,
        replica_ports: list[int] | None = None,
        public_url: str | None = None,
        redis_bus: bool | None = None,
        env: Mapping[str, str] | None = None,
        grpc: bool = False,
        prometheus: bool = False,
        prometheus_port: int | None = None,
        scrape_interval: str = "5s",
    ) -> None:
        if replicas < 1:
            raise ValueError("a cluster needs at least one replica")
        if replica_ports is not None and len(replica_ports) != replicas:
            raise ValueError("give one port per replica")
        self.database_url = database_url
        self.redis_url = redis_url
        self.workdir = workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nginx_port = nginx_port or free_port()
        self.nginx_url = f"http://127.0.0.1:{self.nginx_port}"
        self.public_url = public_url or self.nginx_url
        self.redis_bus = redis_bus_default() if redis_bus is None else redis_bus
        self.extra_env = dict(env or {})
        ports = replica_ports or [free_port() for _ in range(replicas)]
        self.replicas = [
            Replica(
                i, f"a2a-{i + 1}", port, self.workdir / f"replica-{i + 1}.log", free_port() if grpc else 0
            )
            for i, port in enumerate(ports)
        ]
        self.grpc_port = free_port() if grpc else 0
        """nginx's gRPC port (0: no gRPC); the card advertises `127.0.0.1:<it>`."""
        self.nginx_dir = self.workdir / "nginx"
        self.nginx: subprocess.Popen[bytes] | None = None
        self.routed: set[int] = set(range(len(self.replicas)))
        """The replicas nginx sends to (`route`)."""
        self.prometheus_port = (prometheus_port or free_port()) if prometheus else 0
        """Prometheus's port on 127.0.0.1 (0: none); it scrapes every replica every `scrape_interval`."""
        self.prometheus_url = f"http://127.0.0.1:{self.prometheus_port}" if prometheus else ""
        self.scrape_interval = scrape_interval
        self.prometheus_dir = self.workdir / "prometheus"
        self.prometheus: subprocess.Popen[bytes] | None = None
        self.stop_timeout_s = STOP_TIMEOUT_S
        """How long a replica's graceful exit may take before it is killed."""
        self.ready_timeout_s = READY_TIMEOUT_S
        """How long a process it starts (replica, nginx, Prometheus) may take to be ready."""

    # -- URLs and environment ------------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """Each replica's own base URL, in order."""
        return [r.url for r in self.replicas]

    @property
    def pids(self) -> list[int | None]:
        """Each replica's process id (None if it was never started)."""
        return [r.pid for r in self.replicas]

    def replica_env(self, replica: Replica) -> dict[str, str]:
        """The environment of one replica process."""
        env = {**os.environ, **self.extra_env}
        env.update(
            DATABASE_URL=self.database_url,
            HOST="127.0.0.1",
            PORT=str(replica.port),
            PUBLIC_URL=self.public_url,
            REPLICA_ID=replica.replica_id,
            # Replicas share one machine: gRPC only when asked for, on a port each, nginx's advertised.
            GRPC_PORT=str(replica.grpc_port),
        )
        if self.grpc_port:
            env["GRPC_PUBLIC_ADDRESS"] = f"127.0.0.1:{self.grpc_port}"
        if self.redis_bus:
            env["REDIS_URL"] = self.redis_url
        else:
            env.pop("REDIS_URL", None)
        if replica.server is not None:
            for name in ("PYTHONPATH", "VIRTUAL_ENV"):
                env.pop(name, None)
        return env

    # -- whole cluster -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Migrate, start every replica, wait until each is ready, then start nginx (and Prometheus) and wait
        for it."""
        try:
            self.migrate()
            for r in self.replicas:
                self._spawn(r)
            for r in self.replicas:
                self.wait_ready(r.index)
            self.start_nginx()
            if self.prometheus_port:
                self.start_prometheus()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop Prometheus and nginx, then all replicas (SIGTERM together, SIGKILL after a grace period)."""
        _end(self.prometheus, signal.SIGTERM)
        self.stop_nginx()
        live = [r.proc for r in self.replicas if r.proc is not None and r.proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        for proc in live:
            _end(proc, signal.SIGTERM, self.stop_timeout_s)

    def migrate(self) -> None:
        """`a2a-server migrate` on the shared database."""
        env = self.replica_env(self.replicas[0])
        done = subprocess.run(
            [str(BIN / "a2a-server"), "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"migration failed:\n{done.stdout}{done.stderr}")

    def wait_all_ready(self, timeout: float | None = None) -> None:
        """Wait until every running replica and nginx answer /readyz with 200 (within `ready_timeout_s`
        unless `timeout` says otherwise)."""
        timeout = self.ready_timeout_s if timeout is None else timeout
        for r in self.replicas:
            if r.alive():
                self.wait_ready(r.index, timeout)
        if self.nginx is not None:
            self._wait_nginx(timeout)

    # -- one replica ---------------------------------------------------------------------------------------

    def _spawn(self, r: Replica) -> None:
        if r.alive():
            raise RuntimeError(f"replica {r.replica_id} is already running (pid {r.pid})")
        r.proc = spawn(
            [str(r.server or BIN / "a2a-server"), "serve"],
            r.log_path,
            cwd=r.cwd or ROOT,
            env=self.replica_env(r),
            new_session=True,
        )

    def start_replica(self, i: int) -> None:
        """Start replica `i` (on its old port) and wait until it is ready."""
        self._spawn(self.replicas[i])
        self.wait_ready(i)

    def wait_ready(self, i: int, timeout: float | None = None) -> None:
        """Poll replica `i`'s /readyz until 200 (within `ready_timeout_s` unless `timeout` says otherwise);
        fail early, with its log, if the process exits."""
        r = self.replicas[i]
        if r.proc is None:
            raise RuntimeError(f"replica {r.replica_id} was never started")
        timeout = self.ready_timeout_s if timeout is None else timeout
        wait_ready(r.proc, r.url + r.ready_path, f"replica {r.replica_id}", [r.log_path], timeout)

    def kill(self, i: int) -> None:
        """SIGKILL replica `i`: no goodbye, as in a crash."""
        _end(self.replicas[i].proc, signal.SIGKILL)

    def terminate(self, i: int, must_be_graceful: bool = False) -> None:
        """SIGTERM replica `i` and wait for its graceful exit (SIGKILL after `stop_timeout_s`).
        `must_be_graceful`: a test about what a graceful exit does fails on the kill, with the replica's log,
        instead of asserting on what a kill left."""
        r = self.replicas[i]
        if not _end(r.proc, signal.SIGTERM, self.stop_timeout_s) and must_be_graceful:
            raise RuntimeError(
                f"replica {r.replica_id} did not exit within {self.stop_timeout_s}s of SIGTERM and was "
                f"killed; {r.log_path}:\n{log_tail(r.log_path, 40)}"
            )

    def restart(self, i: int) -> None:
        """Stop replica `i` gracefully if it runs, start it again, wait until ready."""
        self.terminate(i)
        self.start_replica(i)

    # -- nginx ---------------------------------------------------------------------------------------------

    def start_nginx(self) -> None:
        """Render the loopback config for the replicas' ports and run nginx in the foreground."""
        if self.nginx is not None and self.nginx.poll() is None:
            return
        conf = self._write_nginx_conf()
        self.nginx = spawn(
            nginx_command(self.nginx_dir, conf), self.nginx_dir / "nginx.out", new_session=True
        )
        self._wait_nginx(self.ready_timeout_s)

    def _write_nginx_conf(self) -> Path:
        routed = [r for r in self.replicas if r.index in self.routed]
        upstreams = [f"127.0.0.1:{r.port}" for r in routed]
        grpc = [f"127.0.0.1:{r.grpc_port}" for r in routed if r.grpc_port]
        return write_local(self.nginx_dir, upstreams, self.nginx_port, grpc, self.grpc_port)

    def route(self, indexes: Iterable[int] | None = None, timeout: float | None = None) -> None:
        """Send nginx's new requests to these replicas only (None: all): the config rendered again and
        nginx reloaded (SIGHUP: new workers take new connections, the old ones finish what they carry, open
        streams included), as a load balancer takes a replica out before it is stopped. Returns once
        nginx's answers come only from those replicas (their /healthz names them)."""
        self.routed = set(range(len(self.replicas)) if indexes is None else indexes)
        if not self.routed:
            raise ValueError("route to at least one replica")
        self._write_nginx_conf()
        if self.nginx is None or self.nginx.poll() is not None:
            return
        self.nginx.send_signal(signal.SIGHUP)
        wanted = {self.replicas[i].replica_id for i in self.routed}
        timeout = self.ready_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        in_a_row = 0
        while in_a_row < 2 * len(self.replicas) + 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx still routes elsewhere than {sorted(wanted)} after {timeout}s")
            try:
                with urllib.request.urlopen(self.nginx_url + "/healthz", timeout=2) as resp:
                    replica = json.loads(resp.read()).get("replica")
            except (OSError, ValueError):
                replica = None
            in_a_row = in_a_row + 1 if replica in wanted else 0
            if replica not in wanted:
                time.sleep(0.05)

    def _wait_nginx(self, timeout: float) -> None:
        if self.nginx is None:
            raise RuntimeError("nginx was never started")
        logs = [self.nginx_dir / "nginx.out", self.nginx_dir / "error.log"]
        wait_ready(self.nginx, self.nginx_url + "/readyz", "nginx", logs, timeout)

    def stop_nginx(self) -> None:
        """Fast shutdown of nginx (SIGTERM: open streams are cut, not drained)."""
        _end(self.nginx, signal.SIGTERM)

    # -- Prometheus ----------------------------------------------------------------------------------------

    def start_prometheus(self) -> None:
        """Render the config for every replica's port and run Prometheus on 127.0.0.1 (data in the cluster's
        folder); wait until it answers /-/ready."""
        if self.prometheus is not None and self.prometheus.poll() is None:
            return
        targets = [f"127.0.0.1:{r.port}" for r in self.replicas]
        conf = prometheus_conf.write_local(self.prometheus_dir, targets, self.scrape_interval)
        log = self.prometheus_dir / "prometheus.log"
        self.prometheus = spawn(
            prometheus_conf.prometheus_command(self.prometheus_dir, conf, self.prometheus_port),
            log,
            cwd=ROOT,
            new_session=True,
        )
        wait_ready(
            self.prometheus, self.prometheus_url + "/-/ready", "Prometheus", [log], self.ready_timeout_s
        )

    # -- Redis ---------------------------------------------------------------------------------------------

    def _redis_sh(self, action: str) -> None:
        port = urllib.parse.urlsplit(self.redis_url).port or 6379
        env = {**os.environ, "REDIS_PORT": str(port)}
        done = subprocess.run([str(SCRIPTS / "redis.sh"), action], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/redis.sh {action} failed:\n{done.stderr}")

    def stop_redis(self) -> None:
        """Stop the Redis of `redis_url` (it must have been started by scripts/redis.sh)."""
        self._redis_sh("stop")

    def start_redis(self) -> None:
        """Start the Redis of `redis_url` again (empty: no persistence)."""
        self._redis_sh("start")

    def restart_redis(self, wait_ready: bool = True) -> None:
        """Really stop Redis and start a new, empty process; then wait until the cluster is ready again."""
        self._redis_sh("restart")
        if wait_ready:
            self.wait_all_ready()

    # -- state file for `stop` -----------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """What `python -m scripts.cluster stop` needs to find this cluster's processes."""
        return {
            "supervisor": os.getpid(),
            "nginx": self.nginx.pid if self.nginx else None,
            "replicas": [r.pid for r in self.replicas],
            "prometheus": self.prometheus.pid if self.prometheus else None,
            "nginx_url": self.nginx_url,
        }


# -- command line ----------------------------------------------------------------------------------------


def _workdir(port: int) -> Path:
    return Path(os.environ.get("CLUSTER_DIR", f"/tmp/a2a-cluster-{port}"))


def _sh(*args: str, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(list(args), env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cluster: {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout.strip()


def _pidfile_alive(pid: int | None, needle: str) -> bool:
    """True when `pid` runs and its command line mentions `needle` (guards against reused pids)."""
    if not pid:
        return False
    try:
        return needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def run(args: argparse.Namespace) -> None:
    """Start the topology, print it, wait for Ctrl-C or SIGTERM, then stop what was started."""
    workdir = _workdir(args.port)
    ports = [args.replica_base_port + i for i in range(args.replicas)]
    prometheus_port = args.prometheus_port if args.prometheus else None
    busy = [p for p in [args.port, *ports, prometheus_port] if p and port_in_use(p)]
    if busy:
        sys.exit(f"cluster: port(s) {', '.join(map(str, busy))} already in use on 127.0.0.1")
    workdir.mkdir(parents=True, exist_ok=True)

    stop_event = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_event.set())

    started_pg = started_redis = False
    cluster: Cluster | None = None
    state_file = workdir / "cluster.json"
    try:
        database_url = args.database_url
        if not database_url:
            pg_env = {"PG_DB": "a2a_cluster"}
            started_pg = not port_in_use(int(os.environ.get("PG_PORT", "54329")))
            _sh(str(SCRIPTS / "pg.sh"), "start", env=pg_env)
            database_url = _sh(str(SCRIPTS / "pg.sh"), "url", env=pg_env)
        redis_url = args.redis_url
        if not redis_url:
            status = subprocess.run([str(SCRIPTS / "redis.sh"), "status"], capture_output=True)
            started_redis = status.returncode != 0
            _sh(str(SCRIPTS / "redis.sh"), "start")
            redis_url = _sh(str(SCRIPTS / "redis.sh"), "url")
        _sh(str(SCRIPTS / "install-deb.sh"), "nginx", "nginx")
        if args.prometheus:
            done = subprocess.run(
                [str(SCRIPTS / "install-deb.sh"), "prometheus", "prometheus"], capture_output=True, text=True
            )
            if done.returncode != 0:
                print(f"cluster: running without Prometheus: {done.stderr.strip()}", file=sys.stderr)
                args.prometheus, prometheus_port = False, None

        cluster = Cluster(
            database_url,
            redis_url,
            workdir,
            args.replicas,
            nginx_port=args.port,
            replica_ports=ports,
            public_url=args.public_url,
            redis_bus=args.redis_bus,
            prometheus=args.prometheus,
            prometheus_port=prometheus_port,
            scrape_interval=args.scrape_interval,
        )
        print(f"cluster: starting {args.replicas} replica(s), logs in {workdir}", flush=True)
        cluster.start()
        state_file.write_text(json.dumps(cluster.state()))
        _report(cluster, database_url, redis_url)
        _supervise(cluster, stop_event)
    except RuntimeError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        print("cluster: stopping", flush=True)
        if cluster is not None:
            cluster.stop()
        state_file.unlink(missing_ok=True)
        if started_redis:
            _sh(str(SCRIPTS / "redis.sh"), "stop")
        if started_pg:
            _sh(str(SCRIPTS / "pg.sh"), "stop")
        print("cluster: stopped", flush=True)


def _report(cluster: Cluster, database_url: str, redis_url: str) -> None:
    """Print the URLs, PIDs and log paths of a started cluster."""
    print(f"cluster: ready at {cluster.nginx_url}  (PUBLIC_URL {cluster.public_url})")
    for r in cluster.replicas:
        print(f"  {r.replica_id}  {r.url}  pid {r.pid}  log {r.log_path}")
    nginx_pid = cluster.nginx.pid if cluster.nginx else "-"
    print(f"  nginx  {cluster.nginx_url}  pid {nginx_pid}  files {cluster.nginx_dir}")
    if cluster.prometheus is not None:
        print(
            f"  prometheus  {cluster.prometheus_url}  pid {cluster.prometheus.pid}  scrapes every replica"
            f" every {cluster.scrape_interval}, files {cluster.prometheus_dir}"
        )
    print(f"  database  {database_url}")
    bus = (
        "REDIS_URL set on every replica" if cluster.redis_bus else "REDIS_URL off: in-process bus per replica"
    )
    print(f"  redis     {redis_url}  ({bus})")
    print("cluster: Ctrl-C or `make cluster-stop` stops it", flush=True)


def _supervise(cluster: Cluster, stop_event: threading.Event) -> None:
    """Until a stop signal: report replicas that exit; return early if nginx exits."""
    reported: set[int] = set()
    while not stop_event.wait(0.5):
        for r in cluster.replicas:
            if not r.alive() and r.index not in reported:
                reported.add(r.index)
                code = r.proc.returncode if r.proc else None
                print(f"cluster: {r.replica_id} exited (code {code}); see {r.log_path}", flush=True)
        if cluster.nginx is not None and cluster.nginx.poll() is not None:
            print("cluster: nginx exited", flush=True)
            return
        if cluster.prometheus is not None and cluster.prometheus.poll() is not None:
            print(f"cluster: prometheus exited; see {cluster.prometheus_dir}/prometheus.log", flush=True)
            return


def stop(args: argparse.Namespace) -> None:
    """Stop a running `cluster run` through its state file (SIGTERM to the supervisor, or its orphans)."""
    state_file = _workdir(args.port) / "cluster.json"
    if not state_file.exists():
        print(f"cluster: nothing to stop ({state_file} is absent)")
        return
    state = json.loads(state_file.read_text())
    supervisor = state.get("supervisor")
    if _pidfile_alive(supervisor, "scripts.cluster"):
        os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S + 10
        while _pidfile_alive(supervisor, "scripts.cluster") and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"cluster: stopped (supervisor pid {supervisor})")
        return
    # The supervisor died without cleaning up: end the processes it left behind.
    orphans = [(state.get("nginx"), "nginx"), (state.get("prometheus"), "prometheus")]
    orphans += [(pid, "a2a-server") for pid in state.get("replicas", [])]
    for pid, needle in orphans:
        if _pidfile_alive(pid, needle):
            os.kill(pid, signal.SIGTERM)
            print(f"cluster: sent SIGTERM to {needle} pid {pid}")
    state_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    """`python -m scripts.cluster [run|stop] [options]`."""
    parser = argparse.ArgumentParser(prog="python -m scripts.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", choices=["run", "stop"], default="run")
    parser.add_argument(
        "--replicas", type=int, default=int(os.environ.get("CLUSTER_REPLICAS", "3")), help="default 3"
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("CLUSTER_PORT", "8080")), help="nginx port (8080)"
    )
    parser.add_argument(
        "--replica-base-port", type=int, default=None, help="first replica port (default: nginx port + 1)"
    )
    parser.add_argument(
        "--prometheus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run Prometheus scraping every replica (default: %(default)s)",
    )
    parser.add_argument(
        "--prometheus-port",
        type=int,
        default=int(os.environ.get("CLUSTER_PROMETHEUS_PORT", "9090")),
        help="Prometheus's port (9090)",
    )
    parser.add_argument("--scrape-interval", default="5s", help="how often Prometheus scrapes (5s)")
    parser.add_argument("--public-url", default=None, help="PUBLIC_URL of every replica (default: nginx URL)")
    parser.add_argument("--database-url", default=os.environ.get("CLUSTER_DATABASE_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("CLUSTER_REDIS_URL"))
    parser.add_argument(
        "--redis-bus",
        action=argparse.BooleanOptionalAction,
        default=redis_bus_default(),
        help="give the replicas REDIS_URL (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.replica_base_port is None:
        args.replica_base_port = args.port + 1
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    {"run": run, "stop": stop}[args.action](args)


if __name__ == "__main__":
    main()
