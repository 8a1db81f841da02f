"""`make bench-cluster`: the scale-out benchmarks, ours beside a2a-sdk 1.3.0's cluster mode, in one run.

1. Cross-replica propagation: a task on replica A emits chunks stamped with `time.time_ns()` (bench/agents.py
   for ours, the same script in bench/reference_server.py for the SDK); a `tasks/resubscribe` stream on
   replica B (and one on A, for comparison) times each chunk's arrival. Ours: 2 replicas sharing PostgreSQL
   and Redis. Reference: 2 replicas of the SDK's cluster mode on one PostgreSQL, whose `tasks/resubscribe`
   for a task running elsewhere polls the `task_events` table every 0.5 s.
2. Blocking `message/send` throughput (echo) at c=64 by wrk: ours with 1 replica (direct) and 3 replicas
   (behind nginx), the SDK with 1 replica (`DatabaseTaskStore`, as in bench/send.py) and its 2-replica
   cluster mode behind the same nginx config. bench/send.py's machinery: warm-up, quiet machine, retries,
   checked answers, CPU split (per replica, nginx, Redis, PostgreSQL, wrk, others).
3. Streamed events/s through one of our replicas: tasks emitting chunks as fast as they can, N readers
   (`tasks/resubscribe`) on the same replica; complete `data:` events delivered per second in total, each
   stream checked for order and completeness by SSE id.
4. Many open SSE streams on one of our replicas (10,000 by default, spread over 100 `sleep:600` tasks, from
   one asyncio process): the replica's VmRSS and VmHWM once every stream has its first event, then (after
   an optional hold) the tasks are cancelled and every stream must end with `canceled`.
5. A reader slower than its task (bench/reader.py): on a freshly started replica each time, a `chunks:300000`
   task read by one `tasks/resubscribe` stream as fast as it can, then by one reading 64 KiB every 20 ms;
   the replica's VmRSS every 100 ms, how far behind each reader was when the task completed, every event
   checked. The slow reader's growth must stay near the fast one's: its lag belongs in the event log.

Each topology runs alone on its own fresh database, one after the other. Prints a table (metric | ours |
reference | target | met?) and saves the raw figures to bench/results/cluster-<time>.json, the processes'
logs under bench/results/cluster-<time>/. Exits non-zero when a check failed (not when a target is missed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from scripts.cluster import Cluster
from scripts.nginx_conf import nginx_command, write_local
from scripts.ready import spawn, wait_ready

from . import floor
from .cpu import CpuUse, CpuWindow, wait_quiet
from .load import ensure_wrk
from .reader import ReadResult, read_task
from .send import QUIET_CORES, Measured, measure, send_once
from .servers import (
    ROOT,
    ReferenceClusterServer,
    ReferenceServer,
    create_database,
    drop_database,
    free_port,
    task_states,
)
from .stamp import stamp_text
from .streams import (
    PropagationRun,
    RatePoint,
    events_rate,
    many_streams,
    memory_kib,
    percentile,
    propagation,
)

RESULTS = Path(__file__).resolve().parent / "results"
REF = "a2a-sdk 1.3.0"
TARGET_P99_MS = 2.0
"""Issue 24: cross-replica delay p99 at most this, at TARGET_RATE chunks/s (the other rates are shown)."""
TARGET_RATE = 200.0
TARGET_EVENTS_PER_S = 20_000.0
"""Issue 24: one task to one reader, events/s (the other task/reader mixes are shown)."""
TARGET_STREAMS = 10_000
TARGET_RSS_MIB = 300.0
"""Issue 24: the replica's VmRSS with TARGET_STREAMS open streams."""
REF_POLL_S = 0.5
READER_SLACK_MIB = 32.0
"""Issue 24: the slow reader's peak growth at most the fast reader's plus this. What a lagging stream may hold
is bounded and small: 64 framed events ahead of the client (app/api/bindings/sse.py BUFFER) and a 64 KiB
batch, a bus subscription of at most 1,024 records, one 500-event replay page (app/tasks/follow.py), the
transport's 64 KiB write buffer: a few MiB at most. The rest of the slack is the allocator's noise between two
fresh processes. Lag kept in memory costs far more: the issue saw 237 MiB for the same task."""
READER_MIN_LAG = 0.1
"""The slow reader counts as behind when the task completes with at least this share of its events unread;
else the slow row is not judged (it did not lag, so it says nothing about lag)."""
SECTIONS = ("propagation", "throughput", "events", "streams", "reader")
OUR_ENV = {
    "AGENT_ADAPTER": "bench.agents:StampAgent",
    "LOG_LEVEL": "warning",
    "MAX_CONCURRENT_TASKS": "256",
    "AUTH_MODE": "off",
    "TASK_RATE_PER_MIN": "0",
    "MAX_STREAMS_PER_PRINCIPAL": "0",
}
COMMIT_NOTE = (
    "each delay includes the commit to PostgreSQL before the event is published (by design: no reader "
    "sees an event that is not durable)"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short points, no retries, 2,000 streams")
    p.add_argument("--sections", default=env("BENCH_SECTIONS", ",".join(SECTIONS)), help=",".join(SECTIONS))
    p.add_argument("--servers", default=env("BENCH_SERVERS", "ours,reference"), help="ours,reference")
    p.add_argument("--duration", type=float, default=None, help="s per throughput point (10; quick 3)")
    p.add_argument("--warmup", type=float, default=None, help="s of warm-up per point (2; quick 1)")
    p.add_argument("--concurrency", default="64", help="wrk connections per throughput point, e.g. 16,64")
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--text", default="hello", help="the echoed message text")
    p.add_argument(
        "--retries", type=int, default=None, help="new tries for a point others disturbed (2; quick 0)"
    )
    p.add_argument(
        "--quiet-wait", type=float, default=None, help="longest wait for a quiet machine, s (60; quick 10)"
    )
    p.add_argument(
        "--prop-runs", type=int, default=None, help="stamped tasks per rate and server (3; quick 1)"
    )
    p.add_argument("--prop-chunks", type=int, default=200, help="stamped chunks per task")
    p.add_argument("--prop-intervals", default="5,20", help="ms between stamped chunks, one point each")
    p.add_argument("--prop-delay-ms", type=float, default=500, help="pause before the first chunk")
    p.add_argument("--event-points", default="1x1,1x10,10x10", help="TASKSxREADERS, comma-separated")
    p.add_argument("--event-chunks", type=int, default=None, help="chunks per point (10000; quick 2000)")
    p.add_argument("--streams", type=int, default=None, help="open SSE streams (10000; quick 2000)")
    p.add_argument("--stream-tasks", type=int, default=100, help="tasks the streams are spread over")
    p.add_argument("--hold", type=float, default=None, help="s to keep the streams open (35; quick 0)")
    p.add_argument(
        "--reader-chunks",
        type=int,
        default=None,
        help="chunks of the reader section's task (300000; quick 30000)",
    )
    p.add_argument("--postgres-url", default=env("BENCH_POSTGRES_URL"))
    p.add_argument("--redis-url", default=env("BENCH_REDIS_URL"))
    p.add_argument("--keep-db", action="store_true", help="keep the bench databases afterwards")
    args = p.parse_args(argv)
    if not args.postgres_url or not args.redis_url:
        p.error("BENCH_POSTGRES_URL and BENCH_REDIS_URL (or the options) are needed: `make bench-cluster`")
    quick = args.quick
    for name, full, short in [
        ("duration", 10.0, 3.0),
        ("warmup", 2.0, 1.0),
        ("prop_runs", 3, 1),
        ("event_chunks", 10000, 2000),
        ("streams", TARGET_STREAMS, 2000),
        ("hold", 35.0, 0.0),
        ("reader_chunks", 300_000, 30_000),
        ("retries", 2, 0),
        ("quiet_wait", 60.0, 10.0),
    ]:
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    args.prop_intervals = [float(v) for v in args.prop_intervals.split(",") if v.strip()]
    args.event_points = [tuple(int(x) for x in v.split("x")) for v in args.event_points.split(",") if v]
    bad = (set(args.sections) - set(SECTIONS)) | (set(args.servers) - {"ours", "reference"})
    if bad:
        p.error(f"unknown section or server {sorted(bad)}")
    return args


def say(line: str) -> None:
    print(line, flush=True)


def raise_nofile(need: int) -> tuple[int, int]:
    """Raise this process's RLIMIT_NOFILE (inherited by the replicas it starts) to at least `need`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, need)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        except (ValueError, OSError):
            want = hard
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def nofile_of(pid: int) -> int:
    """The soft open-files limit of a process, from /proc/<pid>/limits."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return 0


def redis_pid(url: str) -> int | None:
    """The redis-server listening on `url`'s port (to count its CPU apart)."""
    port = urlsplit(url).port or 6379
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "redis-server" in cmd and f":{port}" in cmd:
                return int(entry.name)
    return None


async def commit_latency(url: str, n: int = 200) -> dict[str, float]:
    """Round trip of a one-row autocommitted INSERT on the bench PostgreSQL, ms: the floor under a delay."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (x int)")
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await conn.execute("INSERT INTO bench_commit_probe VALUES (1)")
            times.append((time.perf_counter() - t0) * 1000)
        await conn.execute("DROP TABLE bench_commit_probe")
    finally:
        await conn.close()
    return {"p50_ms": round(percentile(times, 50), 3), "p99_ms": round(percentile(times, 99), 3)}


def _stamps_in(value: Any) -> list[int]:
    """Every emission stamp (a string of 18+ digits) anywhere in a stored event body."""
    if isinstance(value, str):
        return [int(value)] if value.isdigit() and len(value) >= 18 else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _stamps_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _stamps_in(v)]
    return []


async def split_delays(url: str, runs: list[PropagationRun]) -> dict[str, dict[str, float]]:
    """Ours only: where a chunk's time goes, split at the event row's `created_at` (set just before the
    group commit): emission → write (agent queue, mapping, task lock) and write → receipt on B (commit,
    publish, Redis, B's stream, the client)."""
    received = {s: t for r in runs for s, t in r.cross.received.items()}
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await conn.fetch(
            "SELECT body, created_at FROM events WHERE task_id = ANY($1::text[])", [r.task_id for r in runs]
        )
    finally:
        await conn.close()
    before, after = [], []
    for row in rows:
        body = json.loads(row["body"]) if isinstance(row["body"], str) else row["body"]
        written = row["created_at"].timestamp() * 1e9
        for stamp in _stamps_in(body):
            before.append((written - stamp) / 1e6)
            if stamp in received:
                after.append((received[stamp] - written) / 1e6)
    return {"emitted_to_write": summarize_delays(before), "write_to_receipt_on_b": summarize_delays(after)}


def summarize_delays(values: list[float]) -> dict[str, float]:
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 50), 2),
        "p90_ms": round(percentile(values, 90), 2),
        "p99_ms": round(percentile(values, 99), 2),
        "max_ms": round(max(values), 2) if values else 0.0,
    }


# ---- topologies ----------------------------------------------------------------------------------------


class Proxy:
    """nginx in front of the SDK's replicas, rendered from the same template as ours (scripts/nginx_conf)."""

    def __init__(self, workdir: Path, ports: list[int]) -> None:
        self.dir = workdir / "nginx"
        self.ports = ports
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = write_local(self.dir, [f"127.0.0.1:{p}" for p in self.ports], self.port)
        self.proc = spawn(nginx_command(self.dir, conf), self.dir / "nginx.out", new_session=True)
        logs = [self.dir / "nginx.out", self.dir / "error.log"]
        wait_ready(self.proc, self.url + "/readyz", "nginx for the reference", logs)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)


@dataclass
class Topology:
    """Replicas (ours or the SDK's) on one fresh database, reached directly or through nginx.

    Satisfies bench/send.py's `Target`, so its `measure` runs wrk against `rpc_url`.
    """

    key: str
    label: str
    database_url: str
    workdir: Path
    redis_url: str | None = None
    cluster: Cluster | None = None
    refs: list[ReferenceServer] = field(default_factory=list)
    proxy: Proxy | None = None
    direct: bool = True

    @property
    def urls(self) -> list[str]:
        if self.cluster is not None:
            return self.cluster.urls
        return [r.base_url for r in self.refs]

    @property
    def base_url(self) -> str:
        if self.direct:
            return self.urls[0]
        if self.cluster is not None:
            return self.cluster.nginx_url
        assert self.proxy is not None
        return self.proxy.url

    @property
    def rpc_url(self) -> str:
        return self.base_url + "/a2a/jsonrpc"

    @property
    def pids(self) -> list[int]:
        if self.cluster is not None:
            return [p for p in self.cluster.pids if p]
        return [r.pid for r in self.refs]

    @property
    def cpu_groups(self) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        nginx = self.cluster.nginx if self.cluster is not None else (self.proxy and self.proxy.proc)
        if nginx is not None and nginx.poll() is None:
            groups["nginx"] = [nginx.pid]
        pid = redis_pid(self.redis_url) if self.redis_url else None
        if pid:
            groups["redis"] = [pid]
        return groups

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.proxy is not None:
            self.proxy.stop()
        for r in self.refs:
            r.stop()


def ours(args: argparse.Namespace, stamp: str, replicas: int, direct: bool, bus: bool = True) -> Topology:
    """Our replicas (scripts/cluster.py's Cluster: Redis bus, nginx in front) on a fresh database.

    `bus=False` leaves REDIS_URL unset: the single-process deployment with the in-process bus.
    """
    key = f"ours{replicas}" + ("" if bus else "-inproc")
    db = asyncio.run(create_database(args.postgres_url, f"bench_{key.replace('-', '_')}"))
    workdir = RESULTS / f"cluster-{stamp}" / key
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**OUR_ENV, "PYTHONPATH": path}
    cluster = Cluster(db, args.redis_url, workdir, replicas, redis_bus=bus, env=env)
    label = f"ours, {replicas} replica{'s' * (replicas > 1)}" + ("" if direct else " behind nginx")
    label += "" if bus else ", in-process bus (no REDIS_URL)"
    topo = Topology(key, label, db, workdir, args.redis_url if bus else None, cluster=cluster, direct=direct)
    try:
        cluster.start()
    except BaseException:
        asyncio.run(drop_database(args.postgres_url, db))
        raise
    return topo


def reference(args: argparse.Namespace, stamp: str, replicas: int, cluster_mode: bool) -> Topology:
    """The SDK's server: 1 replica with DatabaseTaskStore, or N cluster-mode replicas behind nginx."""
    db = asyncio.run(create_database(args.postgres_url, f"bench_ref{replicas}"))
    workdir = RESULTS / f"cluster-{stamp}" / f"reference-{replicas}"
    workdir.mkdir(parents=True, exist_ok=True)
    cls = ReferenceClusterServer if cluster_mode else ReferenceServer
    mode = "cluster mode" if cluster_mode else "DatabaseTaskStore"
    label = f"{REF}, {replicas} replica{'s' * (replicas > 1)} ({mode})"
    refs = [cls(f"{REF} #{i + 1}", db, workdir / f"replica-{i + 1}.log") for i in range(replicas)]
    topo = Topology(f"ref{replicas}", label, db, workdir, refs=refs, direct=replicas == 1)
    try:
        for r in refs:  # one after the other: each creates the tables it misses at start-up
            r.start()
        if replicas > 1:
            topo.proxy = Proxy(workdir, [r.port for r in refs])
            topo.proxy.start()
            topo.label += " behind nginx"
    except BaseException:
        topo.stop()
        asyncio.run(drop_database(args.postgres_url, db))
        raise
    return topo


def finish(topo: Topology, args: argparse.Namespace) -> None:
    topo.stop()
    if not args.keep_db:
        asyncio.run(drop_database(args.postgres_url, topo.database_url))


# ---- sections ------------------------------------------------------------------------------------------


def cpu_text(u: CpuUse) -> str:
    split = "+".join(f"{v:.2f}" for v in u.servers) if len(u.servers) > 1 else f"{u.server:.2f}"
    groups = "".join(f" {k} {v:.2f}" for k, v in u.groups.items())
    return (
        f"cores: server {split}{groups} postgres {u.postgres:.2f} client {u.loadgen:.2f} other {u.other:.2f}"
    )


def throughput(topo: Topology, args: argparse.Namespace, wrk: str | None, out: dict[str, Any]) -> None:
    """bench/send.py's points against a topology, then the stored tasks are checked."""
    send_once(topo, args.text)
    points: dict[str, Any] = {}
    problems: list[str] = []
    answered = 0
    for c in args.concurrency:
        m: Measured = measure(topo, args, wrk, c)
        p = m.point
        answered += p.requests
        points[str(c)] = m.to_json()
        say(
            f"  {topo.label}: c={c} {p.rps:8.1f} req/s  p50 {p.p50_ms:6.1f} ms  p99 {p.p99_ms:6.1f} ms  "
            f"| {cpu_text(m.cpu)} | {m.server_cpu_ms:.2f} ms server CPU/req"
            + (f"  FAILURES {p.failures}: {p.sample[:200]}" if p.failures else "")
            + ("  (disturbed)" if m.disturbed else "")
        )
        if p.failures:
            problems.append(f"c={c}: {p.failures} failed ({p.errors}, bad {p.bad}): {p.sample[:300]}")
    send_once(topo, args.text)
    time.sleep(1)
    stored = asyncio.run(task_states(topo.database_url))
    unfinished = {s: n for s, n in stored.items() if s not in ("completed", "TASK_STATE_COMPLETED")}
    if unfinished:
        problems.append(f"stored tasks not completed: {unfinished}")
    if sum(stored.values()) < answered:
        problems.append(f"{sum(stored.values())} tasks stored for {answered} answered requests")
    out["throughput"][topo.key] = {
        "label": topo.label,
        "points": points,
        "stored_tasks": stored,
        "problems": problems,
    }


def propagation_section(topo: Topology, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Stamped tasks on replica A read on B (and on A), at each chunk interval."""
    a, b = topo.urls[0], topo.urls[1]
    result: dict[str, Any] = {"label": topo.label, "points": {}, "problems": []}
    for interval in args.prop_intervals:
        text = stamp_text(args.prop_chunks, interval, args.prop_delay_ms)
        timeout = 60 + args.prop_chunks * interval / 1000
        best: tuple[list[PropagationRun], CpuUse] | None = None
        for attempt in range(args.retries + 1):
            wait_quiet(QUIET_CORES, args.quiet_wait)
            window = CpuWindow(topo.pids, topo.cpu_groups)
            got = asyncio.run(propagation(a, b, args.prop_runs, args.prop_chunks, text, timeout))
            used = window.stop()
            if best is None or used.other < best[1].other:
                best = (got, used)
            if used.other <= QUIET_CORES or attempt == args.retries:
                break
            say(f"    disturbed ({used.other:.2f} cores used by other processes), measuring again")
        assert best is not None
        runs, cpu = best
        disturbed = cpu.other > QUIET_CORES
        cross = summarize_delays([d for r in runs for d in r.cross.delays_ms])
        local = summarize_delays([d for r in runs for d in r.local.delays_ms])
        problems = [
            f"{where} reader of task {r.task_id}: {rd.problem}"
            for r in runs
            for where, rd in (("B", r.cross), ("A", r.local))
            if rd.problem
        ]
        rate = 1000 / interval if interval else 0
        split = asyncio.run(split_delays(topo.database_url, runs)) if topo.cluster is not None else {}
        if split and topo.redis_url:
            count = args.prop_runs * args.prop_chunks
            split["floor"] = asyncio.run(floor.probe(topo.database_url, topo.redis_url, count, interval))
        result["points"][f"{interval:g}"] = {
            "interval_ms": interval,
            "chunks_per_s": rate,
            "cross_replica": cross,
            "same_replica": local,
            **split,
            "runs": [r.task_id for r in runs],
            "cpu_cores": cpu.to_json(),
            "disturbed": disturbed,
            "problems": problems,
        }
        result["problems"] += problems
        say(
            f"  {topo.label}: {rate:.0f} chunks/s, {cross['samples']} chunks: A→B p50 {cross['p50_ms']:.1f}"
            f" p99 {cross['p99_ms']:.1f} max {cross['max_ms']:.1f} ms | A→A p50 {local['p50_ms']:.1f}"
            f" p99 {local['p99_ms']:.1f} ms | {cpu_text(cpu)}"
            + (f"  PROBLEMS {problems[:2]}" if problems else "")
            + ("  (disturbed)" if disturbed else "")
        )
        if split:
            pre, post = split["emitted_to_write"], split["write_to_receipt_on_b"]
            say(
                f"    split at the event row's created_at: emitted → write p50 {pre['p50_ms']:.1f} p99 "
                f"{pre['p99_ms']:.1f} ms; write → received on B p50 {post['p50_ms']:.1f} p99 "
                f"{post['p99_ms']:.1f} ms"
            )
        if "floor" in split:
            hops = split["floor"]
            say(
                f"    the same hops without the server (bench/floor.py: commit, PUBLISH, a relay process):"
                f" p50 {hops['p50_ms']:.1f} p99 {hops['p99_ms']:.1f} ms"
            )
    out["propagation"][topo.key] = result


def events_section(topo: Topology, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Fast tasks on one replica, N readers there; events delivered per second in total."""
    points = []
    for tasks, readers in args.event_points:
        chunks = max(1, args.event_chunks // tasks)
        best: tuple[RatePoint, CpuUse] | None = None
        for attempt in range(args.retries + 1):
            wait_quiet(QUIET_CORES, args.quiet_wait)
            window = CpuWindow(topo.pids, topo.cpu_groups)
            point = asyncio.run(events_rate(topo.urls[0], tasks, readers, chunks, 1.0, 300))
            cpu = window.stop()
            if best is None or cpu.other < best[1].other:
                best = (point, cpu)
            if cpu.other <= QUIET_CORES or attempt == args.retries:
                break
            say(f"    disturbed ({cpu.other:.2f} cores used by other processes), measuring again")
        assert best is not None
        point, cpu = best
        disturbed = cpu.other > QUIET_CORES
        points.append({**point.to_json(), "cpu_cores": cpu.to_json(), "disturbed": disturbed})
        say(
            f"  {topo.label}: {tasks} task(s) x {chunks} chunks → {readers} reader(s): "
            f"{point.events} events in {point.seconds:.2f} s = {point.rate:,.0f} events/s "
            f"| {cpu_text(cpu)} (client: this process, {point.client_cpu:.2f})"
            + (f"  PROBLEMS {point.problems[:2]}" if point.problems else "")
            + ("  (disturbed)" if disturbed else "")
        )
    out["events"] = {"label": topo.label, "points": points}


def streams_section(topo: Topology, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Restart the replica (a clean baseline), then hold many streams on it and read its memory."""
    assert topo.cluster is not None
    topo.cluster.restart(0)
    pid = topo.pids[0]
    log_path = topo.cluster.replicas[0].log_path
    log_start = log_path.stat().st_size
    limit = nofile_of(pid)
    say(f"  replica pid {pid}, open-files limit {limit}, VmRSS {memory_kib(pid)['VmRSS'] / 1024:.0f} MiB")
    if limit < args.streams + 100:
        raise RuntimeError(f"the replica may open only {limit} files, fewer than {args.streams} streams")
    wait_quiet(QUIET_CORES, args.quiet_wait)
    window = CpuWindow(topo.pids, topo.cpu_groups)
    m = asyncio.run(
        many_streams(
            topo.urls[0],
            pid,
            args.stream_tasks,
            args.streams,
            "sleep:600",
            open_timeout_s=300,
            end_timeout_s=120,
            hold_s=args.hold,
            progress=lambda line: say("    " + line),
        )
    )
    cpu = window.stop()
    log = log_path.read_bytes()[log_start:].decode(errors="replace")
    errors = {
        "unhandled_asgi_errors": log.count("Exception in ASGI application"),
        "pool_timeouts": log.count("QueuePool limit"),
        "tracebacks": log.count("Traceback"),
    }
    if errors["tracebacks"]:
        m.problems.append(f"the replica logged {errors} during the streams phase; see {log_path}")
    mib = 1 / 1024
    say(
        f"  {m.streams} streams on {m.tasks} tasks: all first events after {m.open_s:.1f} s; replica VmRSS "
        f"{m.rss_idle_kib * mib:.0f} MiB idle, {m.rss_before_kib * mib:.0f} MiB with the tasks, "
        f"{m.rss_open_kib * mib:.0f} MiB with the streams (VmHWM {m.hwm_open_kib * mib:.0f} MiB), "
        f"{(m.rss_open_kib - m.rss_before_kib) / max(m.streams, 1):.1f} KiB per stream; after the cancels: "
        f"{m.ended_canceled} of {m.streams} streams ended canceled within {m.end_s:.1f} s | {cpu_text(cpu)}"
    )
    if args.hold > 0:
        say(
            f"  while the streams were held idle for {args.hold:g} s the replica used "
            f"{m.hold_cpu_cores:.2f} cores"
        )
    for p in m.problems:
        say(f"  PROBLEM {p}")
    out["streams"] = {
        "label": topo.label,
        "nofile_limit": limit,
        **m.to_json(),
        "cpu_cores": cpu.to_json(),
        "replica_log": errors,
    }


def reader_section(topo: Topology, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """A fast reader, then a slow one, of a `chunks:<n>` task, each on a replica just (re)started so that
    its baseline and peak are its own (freed memory is not given back to the system at once)."""
    assert topo.cluster is not None
    mib = 1 / 1024
    results: list[dict[str, Any]] = []
    for slow in (False, True):
        topo.cluster.restart(0)
        pid = topo.pids[0]
        log_path = topo.cluster.replicas[0].log_path
        log_start = log_path.stat().st_size
        wait_quiet(QUIET_CORES, args.quiet_wait)
        window = CpuWindow(topo.pids, topo.cpu_groups)
        timeout = 120 + args.reader_chunks / 2000
        rd: ReadResult = asyncio.run(
            read_task(topo.urls[0], pid, topo.database_url, args.reader_chunks, slow, timeout)
        )
        cpu = window.stop()
        tracebacks = log_path.read_bytes()[log_start:].count(b"Traceback")
        if tracebacks:
            rd.problems.append(f"the replica logged {tracebacks} tracebacks; see {log_path}")
        behind = rd.lag_events / max(rd.seq_at_done, 1)
        say(
            f"  {rd.reader} reader of chunks:{args.reader_chunks}: replica VmRSS "
            f"{rd.rss_baseline_kib * mib:.0f} → peak {rd.peak_kib * mib:.0f} MiB "
            f"(+{rd.growth_kib * mib:.0f}), "
            f"{rd.rss_end_kib * mib:.0f} at the stream's end, {rd.rss_after_kib * mib:.0f} a second later; "
            f"{rd.events:,} events ({rd.bytes_read / 2**20:.0f} MiB) in {rd.seconds:.1f} s = "
            f"{rd.events_per_s:,.0f}/s; the task completed after {rd.task_s:.1f} s with the reader "
            f"{rd.lag_events:,} events ({behind:.0%}) and {rd.lag_s:.1f} s behind | {cpu_text(cpu)}"
        )
        for p in rd.problems:
            say(f"  PROBLEM {p}")
        results.append({**rd.to_json(), "behind": round(behind, 3), "cpu_cores": cpu.to_json()})
    out["reader"] = {
        "label": topo.label,
        "chunks": args.reader_chunks,
        "readers": results,
        "problems": [f"{r['reader']} reader: {p}" for r in results for p in r["problems"]],
    }


# ---- report --------------------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms")


def table(out: dict[str, Any], args: argparse.Namespace) -> str:
    """The final table: metric | ours | reference | target | met?"""
    rows: list[tuple[str, str, str, str, str]] = []
    prop = out["propagation"]
    for interval in args.prop_intervals if prop else []:
        k = f"{interval:g}"
        o = prop.get("ours2", {}).get("points", {}).get(k, {})
        r = prop.get("ref2", {}).get("points", {}).get(k, {})
        rate = f"{1000 / interval:.0f} chunks/s" if interval else "no pause"
        for q in ("p50", "p99"):
            cells = []
            for pt in (o, r):
                d = pt.get("cross_replica")
                v = d[f"{q}_ms"] if d and d["samples"] else None
                cells.append((v, _ms(v) + ("*" if v is not None and pt.get("disturbed") else "")))
            judged = q == "p99" and interval and abs(1000 / interval - TARGET_RATE) < 1e-6
            target = f"<= {TARGET_P99_MS:g} ms" if judged else ""
            ours_v = cells[0][0]
            met = "" if not judged or ours_v is None else ("MET" if ours_v <= TARGET_P99_MS else "NOT MET")
            rows.append((f"cross-replica delay {q}, {rate}", cells[0][1], cells[1][1], target, met))
    tp = out["throughput"]
    for c in args.concurrency if tp else []:
        for ours_key, ref_key, what in (
            ("ours1", "ref1", "1 replica"),
            ("ours3", "ref2", "3 replicas (reference: 2, cluster mode) via nginx"),
        ):
            cells = []
            for key in (ours_key, ref_key):
                pt = tp.get(key, {}).get("points", {}).get(str(c))
                cells.append(
                    f"{pt['rps']:,.0f} req/s, p99 {pt['p99_ms']:.0f} ms" + ("*" if pt["disturbed"] else "")
                    if pt
                    else "-"
                )
            rows.append((f"message/send c={c}, {what}", cells[0], cells[1], "", ""))
            if ours_key == "ours1" and "ours1-inproc" in tp:
                pt = tp["ours1-inproc"]["points"].get(str(c))
                cell = f"{pt['rps']:,.0f} req/s, p99 {pt['p99_ms']:.0f} ms" if pt else "-"
                rows.append((f"message/send c={c}, 1 replica, in-process bus", cell, "", "", ""))
    for p in out.get("events", {}).get("points", []):
        judged = p["tasks"] == 1 and p["readers"] == 1
        ok = p["events_per_s"] >= TARGET_EVENTS_PER_S and not p["problems"]
        met = ("MET" if ok else "NOT MET") if judged else ""
        rows.append(
            (
                f"streamed events/s, {p['tasks']} task(s) → {p['readers']} reader(s), 1 replica",
                f"{p['events_per_s']:,.0f}"
                + ("*" if p.get("disturbed") else "")
                + (" (PROBLEMS)" if p["problems"] else ""),
                "not measured",
                f">= {TARGET_EVENTS_PER_S:,.0f}" if judged else "",
                met,
            )
        )
    s = out.get("streams")
    if s:
        mib = s["rss_open_kib"] / 1024
        full = s["streams"] >= TARGET_STREAMS
        ok = full and mib <= TARGET_RSS_MIB and s["ended_canceled"] == s["streams"]
        met = ("MET" if ok else "NOT MET") if full else f"not judged ({s['streams']:,} < {TARGET_STREAMS:,})"
        rows.append(
            (
                f"replica VmRSS, {s['streams']:,} open SSE streams",
                f"{mib:.0f} MiB (HWM {s['hwm_open_kib'] / 1024:.0f})",
                "not measured",
                f"<= {TARGET_RSS_MIB:g} MiB at {TARGET_STREAMS:,}",
                met,
            )
        )
        rows.append(
            (
                "  those streams ended canceled after the cancels",
                f"{s['ended_canceled']:,} of {s['streams']:,}",
                "",
                "all",
                "MET" if s["ended_canceled"] == s["streams"] else "NOT MET",
            )
        )
    rows += reader_rows(out.get("reader"))
    head = ("metric", "ours", f"{REF} reference", "target", "met?")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    line = " | ".join
    lines = [line(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [line(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def reader_rows(r: dict[str, Any] | None) -> list[tuple[str, str, str, str, str]]:
    """The reader section's rows: each reader's memory, and the slow one judged against the fast one."""
    if not r or len(r["readers"]) < 2:
        return []
    fast, slow = r["readers"]
    rows = []
    for rd in (fast, slow):
        rows.append(
            (
                f"replica memory, {rd['reader']} reader of chunks:{r['chunks']:,}",
                f"{rd['rss_baseline_kib'] / 1024:.0f} → {rd['peak_kib'] / 1024:.0f} MiB "
                f"(+{rd['growth_kib'] / 1024:.0f}), {rd['lag_events']:,} events behind at the end"
                + (" (PROBLEMS)" if rd["problems"] else ""),
                "not measured",
                "",
                "",
            )
        )
    bound = fast["growth_kib"] / 1024 + READER_SLACK_MIB
    growth = slow["growth_kib"] / 1024
    lagged = slow["behind"] >= READER_MIN_LAG
    ok = growth <= bound and not slow["problems"] and not fast["problems"]
    met = (
        ("MET" if ok else "NOT MET")
        if lagged
        else f"not judged (the slow reader was {slow['behind']:.0%} behind)"
    )
    rows.append(
        (
            "  slow reader's growth (the lag stays in the event log)",
            f"+{growth:.0f} MiB",
            "",
            f"<= fast's + {READER_SLACK_MIB:g} = {bound:.0f} MiB",
            met,
        )
    )
    return rows


def notes(out: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"* = other processes used more than {QUIET_CORES:g} core during that measurement, even after "
        f"{args.retries} retries."
    ]
    if out["propagation"]:
        lines.append(
            f"propagation: {args.prop_runs} task(s) of {args.prop_chunks} chunks per rate; {COMMIT_NOTE}; "
            f"PostgreSQL commit round trip here: p50 {out['commit_probe'].get('p50_ms', '-')} ms, "
            f"p99 {out['commit_probe'].get('p99_ms', '-')} ms."
        )
    if "ref2" in out["propagation"]:
        lines.append(
            f"reference propagation: a2a-sdk 1.3.0 cluster mode (VersionedDatabaseTaskStore + "
            f"DatabaseTaskEventStream), whose tasks/resubscribe on a replica not running the task polls the "
            f"task_events table every {REF_POLL_S:g} s."
        )
    if out["throughput"]:
        lines.append(
            f"throughput: blocking message/send (echo) by {out['config']['loadgen']}, {args.duration:g} s "
            f"per point after {args.warmup:g} s warm-up. The machine has {os.cpu_count()} cores shared by "
            "every replica, nginx, Redis, PostgreSQL and wrk, so more replicas cannot be faster here (see "
            "the CPU split above)."
        )
    s = out.get("streams")
    if s:
        lines.append(
            f"streams: {s['streams']:,} tasks/resubscribe streams over {s['tasks']} sleep:600 tasks from "
            f"one asyncio process, held {args.hold:g} s after the last first event; then the tasks were "
            "cancelled."
        )
    r = out.get("reader")
    if r:
        lines.append(
            f"reader: one tasks/resubscribe stream of a chunks:{r['chunks']} task on a freshly started "
            "replica, read as fast as it can, then 64 KiB every 20 ms (socket receive buffer 64 KiB); "
            "peak = the replica's VmHWM (VmRSS sampled every 100 ms besides); behind = events the task "
            "had stored, not yet read, when its row turned completed."
        )
    return "\n".join(lines)


def run_sections(args: argparse.Namespace, stamp: str, wrk: str | None, out: dict[str, Any]) -> None:
    sections, servers = set(args.sections), set(args.servers)
    steps: list[tuple[str, Callable[[], Topology], list[Callable[[Topology], None]]]] = []
    tp: Callable[[Topology], None] = lambda t: throughput(t, args, wrk, out)  # noqa: E731
    if "ours" in servers:
        one = []
        if "throughput" in sections:
            one.append(tp)
        if "events" in sections:
            one.append(lambda t: events_section(t, args, out))
        if "streams" in sections:
            one.append(lambda t: streams_section(t, args, out))
        if "reader" in sections:
            one.append(lambda t: reader_section(t, args, out))
        if one:
            steps.append(("ours, 1 replica", lambda: ours(args, stamp, 1, True), one))
        if "throughput" in sections:
            steps.append(("ours, 1 replica, no Redis", lambda: ours(args, stamp, 1, True, bus=False), [tp]))
        if "propagation" in sections:
            steps.append(
                (
                    "ours, 2 replicas",
                    lambda: ours(args, stamp, 2, True),
                    [lambda t: propagation_section(t, args, out)],
                )
            )
        if "throughput" in sections:
            steps.append(("ours, 3 replicas behind nginx", lambda: ours(args, stamp, 3, False), [tp]))
    if "reference" in servers:
        if "throughput" in sections:
            steps.append((f"{REF}, 1 replica", lambda: reference(args, stamp, 1, False), [tp]))
        two = []
        if "propagation" in sections:
            two.append(lambda t: propagation_section(t, args, out))
        if "throughput" in sections:
            two.append(tp)
        if two:
            steps.append((f"{REF}, 2 replicas, cluster mode", lambda: reference(args, stamp, 2, True), two))
    for title, make, actions in steps:
        say(f"{title}:")
        topo = make()
        try:
            for action in actions:
                try:
                    action(topo)
                except Exception as exc:
                    out["problems"].append(f"{topo.label}: {type(exc).__name__}: {exc}")
                    say(f"  PROBLEM {type(exc).__name__}: {exc}")
                    traceback.print_exc()
        finally:
            finish(topo, args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    nofile = raise_nofile(args.streams + 2048)
    wrk = ensure_wrk() if "throughput" in args.sections else None
    loadgen = f"wrk -t{args.threads}" if wrk else "Python load generator (wrk could not be installed)"
    out: dict[str, Any] = {
        "benchmark": (
            "scale-out: propagation, throughput by replicas, streamed events/s, open streams, slow reader"
        ),
        "time": stamp,
        "config": {
            **{k: v for k, v in vars(args).items() if k not in ("postgres_url", "redis_url")},
            "loadgen": loadgen,
            "nofile": list(nofile),
            "our_env": OUR_ENV,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "a2a_sdk": metadata.version("a2a-sdk"),
        },
        "commit_probe": {},
        "propagation": {},
        "throughput": {},
        "problems": [],
    }
    if "propagation" in args.sections:
        out["commit_probe"] = asyncio.run(commit_latency(args.postgres_url))
        say(f"PostgreSQL commit round trip: {out['commit_probe']}")
    run_sections(args, stamp, wrk, out)
    problems = list(out["problems"])
    for section in ("propagation", "throughput"):
        for key, res in out[section].items():
            problems += [f"{section} {key}: {p}" for p in res.get("problems", [])]
    problems += [f"events: {p}" for pt in out.get("events", {}).get("points", []) for p in pt["problems"]]
    problems += [f"streams: {p}" for p in out.get("streams", {}).get("problems", [])]
    problems += [f"reader: {p}" for p in out.get("reader", {}).get("problems", [])]
    out["table"] = table(out, args)
    say("")
    say(out["table"])
    say("")
    say(notes(out, args))
    for p in problems:
        say(f"PROBLEM {p}")
    out["all_problems"] = problems
    path = RESULTS / f"cluster-{stamp}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    say(f"\nraw results: {path}; logs: {RESULTS / f'cluster-{stamp}'}/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
