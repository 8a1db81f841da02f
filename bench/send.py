"""`make bench-send`: blocking `message/send` throughput and latency, ours beside the official SDKs' servers.

The servers (`--servers`): ours on PostgreSQL with every event committed (`ours`), ours on SQLite as `make
run` serves it (`sqlite`), the official JS SDK's server in memory (`js`, bench/js), a2a-sdk's reference
server on PostgreSQL (`reference`); `--baseline REV` adds ours at an earlier commit (a before/after in one
run). Each runs alone, one after the other (`--rounds N` repeats the sequence and reports each point's
median), one process, one worker; the PostgreSQL ones on a fresh database each on the bench PostgreSQL
(BENCH_POSTGRES_URL). For every concurrency a short warm-up precedes a fixed-time closed-loop run by wrk (or
by a Python fallback when wrk cannot be installed). Before each point the bench waits for a quiet machine;
a point that other processes disturbed anyway is measured again. Answers are checked: before and after the
runs one request through httpx must return a completed task echoing the text, every answer during the runs
must be a completed task, and the stored tasks are counted at the end. Prints a table, the targets with MET
or NOT MET, and saves the raw figures to bench/results/send-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import httpx

from . import profile, push
from .cpu import CpuUse, CpuWindow, wait_quiet
from .load import Point, ensure_wrk, run_python, run_wrk
from .servers import (
    ROOT,
    BaselineServer,
    GranianServer,
    JsServer,
    OurServer,
    QuietServer,
    ReferenceServer,
    Server,
    SqliteServer,
    WorkersServer,
    commit_count,
    create_database,
    drop_database,
    task_states,
)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 10.0
"""Issue 11's target: at c=64 at least this many times the reference server's throughput, p99 below
TARGET_P99_MS; issue 24's are in `targets`."""
TARGET_P99_MS = 150.0
TARGET_CONCURRENCY = 64
QUIET_CORES = 0.25
"""The machine counts as quiet below this many busy cores; a point with more `other` is disturbed."""
SERVERS: dict[str, tuple[str, type[Server]]] = {
    "ours": ("ours", OurServer),
    "baseline": ("ours before", BaselineServer),
    "workers": ("ours, N workers", WorkersServer),
    "quiet": ("ours, LOG_LEVEL=warning", QuietServer),
    "granian": ("ours on granian", GranianServer),
    "sqlite": ("ours, SQLite", SqliteServer),
    "js": ("@a2a-js/sdk 1.3.0", JsServer),
    "reference": ("a2a-sdk 1.3.0", ReferenceServer),
}
"""`baseline` runs only with `--baseline REV`, `workers` only with `--workers N`; both right after `ours`.
`quiet` and `granian` (asked for in `--servers`): ours without the access line, under uvicorn and under
granian, for issue 39's cost of logging and of the HTTP server."""
LOG_COST_MOST = 1.05
"""Issue 39: ours at its default level (an access line per request) costs at most this much of the server
CPU per send of ours with no access line."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m bench.send", description=__doc__)
    p.add_argument("--duration", type=float, default=float(env("BENCH_DURATION", "10")), help="s/point")
    p.add_argument("--warmup", type=float, default=float(env("BENCH_WARMUP", "2")), help="s/point")
    p.add_argument("--concurrency", default=env("BENCH_CONCURRENCY", "1,16,64"), help="e.g. 1,16,64")
    p.add_argument(
        "--servers",
        default=env("BENCH_SERVERS", "ours,sqlite,js,reference"),
        help="any of ours,quiet,granian,sqlite,js,reference (default: ours,sqlite,js,reference)",
    )
    p.add_argument(
        "--baseline",
        default=env("BENCH_BASELINE", ""),
        help="also run ours at this commit (checked out in a temporary worktree), right after ours",
    )
    p.add_argument(
        "--baseline-on",
        choices=["postgres", "sqlite"],
        default="postgres",
        help="the baseline's database: PostgreSQL (compared with ours) or SQLite (compared with sqlite)",
    )
    p.add_argument("--rounds", type=int, default=1, help="run the servers' sequence N times; medians")
    p.add_argument(
        "--workers",
        type=int,
        default=int(env("BENCH_WORKERS", "0")),
        help="also run ours with WORKERS=N (needs BENCH_REDIS_URL), right after ours",
    )
    p.add_argument("--redis-url", default=env("BENCH_REDIS_URL"))
    p.add_argument("--threads", type=int, default=1, help="wrk threads (at most the concurrency)")
    p.add_argument("--loadgen", choices=["auto", "wrk", "python"], default="auto")
    p.add_argument("--text", default="hello", help="the user's message text (plain, no quotes)")
    p.add_argument("--retries", type=int, default=2, help="new tries for a point others disturbed")
    p.add_argument("--quiet-wait", type=float, default=60, help="longest wait for a quiet machine, s")
    p.add_argument(
        "--profile",
        type=float,
        default=float(env("BENCH_PROFILE", "0")),
        help="seconds of py-spy on our server at the highest concurrency, after its points (0: none)",
    )
    p.add_argument("--postgres-url", default=env("BENCH_POSTGRES_URL"))
    p.add_argument("--keep-db", action="store_true", help="keep the bench databases afterwards")
    args = p.parse_args(argv)
    if not args.postgres_url:
        p.error(
            "BENCH_POSTGRES_URL (or --postgres-url) is not set: `make bench` starts PostgreSQL and sets it"
        )
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    args.servers = [s.strip() for s in str(args.servers).split(",") if s.strip()]
    if args.baseline and "baseline" not in args.servers:
        _after_ours(args.servers, "baseline", _beside(args))
    elif "baseline" in args.servers and not args.baseline:
        p.error("the baseline server needs --baseline REV")
    if args.workers > 1 and "workers" not in args.servers:
        if not args.redis_url:
            p.error("--workers needs BENCH_REDIS_URL (or --redis-url): the workers share a Redis bus")
        _after_ours(args.servers, "workers")
    elif "workers" in args.servers and args.workers < 2:
        p.error("the workers server needs --workers N (N >= 2)")
    unknown = set(args.servers) - set(SERVERS)
    if unknown:
        p.error(f"unknown server(s) {sorted(unknown)}; choose from {sorted(SERVERS)}")
    return args


def _after_ours(servers: list[str], key: str, ours: str = "ours") -> None:
    """Run `key` right after ours (`ours`: that variant of it; first without it), so the two are measured
    as close as can be."""
    servers.insert(servers.index(ours) + 1 if ours in servers else 0, key)


def _beside(args: argparse.Namespace) -> str:
    """The server the baseline is compared with: ours on the baseline's database."""
    return "sqlite" if args.baseline_on == "sqlite" else "ours"


@dataclass
class Measured:
    """A point, the CPU it cost and the database commits it made (about: the statistics lag)."""

    point: Point
    cpu: CpuUse
    commits_per_s: float
    tries: int = 1

    @property
    def server_cpu_ms(self) -> float:
        """Server CPU per answered request."""
        return 1000 * self.cpu.server / self.point.rps if self.point.rps else 0.0

    @property
    def disturbed(self) -> bool:
        return self.cpu.other > QUIET_CORES

    def to_json(self) -> dict[str, Any]:
        return {
            **self.point.to_json(),
            "cpu_cores": self.cpu.to_json(),
            "server_cpu_ms_per_request": round(self.server_cpu_ms, 3),
            "db_commits_per_s": round(self.commits_per_s, 1),
            "tries": self.tries,
            "disturbed": self.disturbed,
        }


@dataclass
class ServerRun:
    key: str
    label: str
    rounds: dict[int, list[Measured]] = field(default_factory=dict)
    """Every round's measurement of each concurrency."""
    stored: dict[str, int] = field(default_factory=dict)
    warmup_failures: int = 0
    problems: list[str] = field(default_factory=list)
    profile: str = ""

    @property
    def points(self) -> dict[int, Measured]:
        """Each concurrency's median round (by throughput)."""
        return {c: _median(ms) for c, ms in self.rounds.items() if ms}


def _median(ms: list[Measured]) -> Measured:
    ranked = sorted(ms, key=lambda m: m.point.rps)
    return ranked[(len(ranked) - 1) // 2]


class Target(Protocol):
    """What a measured point needs: a JSON-RPC URL, the database, and the server processes' pids.

    A `Server` is one; bench/cluster.py's topologies (replicas behind nginx) are others, whose
    `cpu_groups` name helper processes (nginx, Redis) to count apart from `other`.
    """

    @property
    def label(self) -> str: ...

    @property
    def rpc_url(self) -> str: ...

    @property
    def database_url(self) -> str: ...

    @property
    def pids(self) -> list[int]: ...

    @property
    def cpu_groups(self) -> dict[str, list[int]]: ...


# ---- checks --------------------------------------------------------------------------------------------


def send_once(server: Target, text: str) -> dict[str, Any]:
    """One blocking message/send through httpx; the completed task, or RuntimeError saying what came."""
    r = httpx.post(server.rpc_url, json=push.message(text), timeout=30)
    doc = r.json()
    if r.status_code != 200 or "error" in doc:
        raise RuntimeError(f"{server.label}: message/send answered {r.status_code} {r.text[:400]}")
    task = doc.get("result", {})
    state = task.get("status", {}).get("state")
    texts = [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", [])]
    if task.get("kind") != "task" or state != "completed" or text not in texts:
        raise RuntimeError(f"{server.label}: expected a completed task echoing {text!r}, got {r.text[:400]}")
    return task


# ---- one server ----------------------------------------------------------------------------------------


SETTLE_S = 0.5
"""Pause between the warm-up and the measured run: the warm-up's last requests, which wrk abandons as it
stops, finish first. Otherwise their tasks still hold agent slots (ours: MAX_CONCURRENT_TASKS=64) as the
measured run's first requests arrive, and at c=64 those wait in the queue: a tail of the bench's making."""


def load(server: Target, args: argparse.Namespace, wrk: str | None, c: int, seconds: float) -> Point:
    nonce = uuid.uuid4().hex[:12]
    if wrk:
        return run_wrk(wrk, server.rpc_url, c, seconds, args.threads, nonce, args.text)
    return run_python(server.rpc_url, c, seconds, nonce, args.text)


def measure(server: Target, args: argparse.Namespace, wrk: str | None, c: int) -> Measured:
    """Warm up, then measure; again (keeping the least disturbed try) while others load the machine."""
    best: Measured | None = None
    for attempt in range(1, args.retries + 2):
        wait_quiet(QUIET_CORES, args.quiet_wait)
        if args.warmup > 0:
            warm = load(server, args, wrk, c, args.warmup)
            if warm.failures:
                raise RuntimeError(f"{server.label} c={c}: {warm.failures} failed in warm-up: {warm.sample}")
            time.sleep(SETTLE_S)
        counted = getattr(server, "postgres", True)
        commits0 = asyncio.run(commit_count(server.database_url)) if counted else 0
        window = CpuWindow(server.pids, server.cpu_groups)
        t0 = time.monotonic()
        point = load(server, args, wrk, c, args.duration)
        cpu = window.stop()
        wall = time.monotonic() - t0
        commits = asyncio.run(commit_count(server.database_url)) - commits0 if counted else 0
        m = Measured(point, cpu, commits / wall, attempt)
        if best is None or m.cpu.other < best.cpu.other:
            best = m
        if not m.disturbed:
            break
        print(f"    c={c}: disturbed ({m.cpu.other:.2f} cores used by other processes), measuring again")
    assert best is not None
    return best


def make_server(key: str, args: argparse.Namespace, stamp: str, scratch: Path) -> Server:
    """The server `key` names, its database made (PostgreSQL: a fresh one; SQLite: a file in `scratch`)."""
    label, cls = SERVERS[key]
    log = RESULTS / f"send-{stamp}-{key}.log"
    if cls is BaselineServer:
        if args.baseline_on == "sqlite":
            db = f"sqlite+aiosqlite:///{scratch / f'baseline-{uuid.uuid4().hex[:8]}.db'}"
        else:
            db = asyncio.run(create_database(args.postgres_url, "bench_baseline"))
        server = BaselineServer(f"ours@{args.baseline_commit[:9]}", db, log, args.baseline_checkout)
        server.postgres = args.baseline_on == "postgres"
        return server
    if cls is WorkersServer:
        db = asyncio.run(create_database(args.postgres_url, "bench_workers"))
        return WorkersServer(f"ours, {args.workers} workers", db, log, args.workers, args.redis_url)
    if cls is SqliteServer:
        return cls(label, f"sqlite+aiosqlite:///{scratch / f'{key}-{uuid.uuid4().hex[:8]}.db'}", log)
    if cls.postgres:
        return cls(label, asyncio.run(create_database(args.postgres_url, f"bench_{key}")), log)
    return cls(label, "", log)


def stored_states(server: Server) -> dict[str, int] | None:
    """The stored tasks by state; None for a server that keeps them in memory."""
    if server.postgres:
        return asyncio.run(task_states(server.database_url))
    if isinstance(server, SqliteServer):
        path = server.database_url.split(":///", 1)[1]
        with sqlite3.connect(path) as db:
            return {
                str(state): int(n) for state, n in db.execute("SELECT state, count(*) FROM tasks GROUP BY 1")
            }
    return None


def bench_server(
    run: ServerRun, args: argparse.Namespace, wrk: str | None, stamp: str, scratch: Path
) -> None:
    """One round of `run`'s server: start it on a fresh database, measure every concurrency, check what it
    stored, stop it."""
    server = make_server(run.key, args, stamp, scratch)
    try:
        server.prepare()
        server.start()
        send_once(server, args.text)
        for c in args.concurrency:
            m = measure(server, args, wrk, c)
            run.rounds.setdefault(c, []).append(m)
            p, u = m.point, m.cpu
            commits = f" | {m.commits_per_s:.0f} commits/s" if server.postgres else ""
            print(
                f"  {run.label:>18} c={c:<3} {p.rps:8.1f} req/s  p50 {p.p50_ms:7.2f} ms"
                f"  p99 {p.p99_ms:7.1f} ms"
                f"  | cores: server {u.server:.2f} postgres {u.postgres:.2f} loadgen {u.loadgen:.2f}"
                f" other {u.other:.2f} | server CPU {m.server_cpu_ms:.2f} ms/req"
                + commits
                + (f"  FAILURES {p.failures}" if p.failures else ""),
                flush=True,
            )
            if p.failures:
                run.problems.append(f"c={c}: {p.failures} failed ({p.errors}, bad {p.bad}): {p.sample[:300]}")
            if m.disturbed:
                run.problems.append(f"c={c}: other processes used {u.other:.2f} cores during the point")
        if args.profile > 0 and run.key == "ours" and not run.profile:
            run.profile = profile_pass(server, args, wrk, stamp)
        send_once(server, args.text)
        time.sleep(1)
        stored = stored_states(server)
    finally:
        server.stop()
        if server.postgres and not args.keep_db:
            asyncio.run(drop_database(args.postgres_url, server.database_url))
    if stored is None:
        return
    for state, n in stored.items():
        run.stored[state] = run.stored.get(state, 0) + n
    unfinished = {s: n for s, n in stored.items() if s not in ("completed", "TASK_STATE_COMPLETED")}
    if unfinished:
        run.problems.append(f"stored tasks not completed: {unfinished}")
    answered = sum(ms[-1].point.requests for ms in run.rounds.values())
    if sum(stored.values()) < answered:
        run.problems.append(f"{sum(stored.values())} tasks stored for {answered} answered requests")


def profile_pass(server: Server, args: argparse.Namespace, wrk: str | None, stamp: str) -> str:
    """py-spy on the server during an extra, unmeasured run at the highest concurrency."""
    out = RESULTS / f"send-{stamp}-{server.label}.pyspy.txt"
    spy = profile.start(server.pid, args.profile, out)
    if spy is None:
        return "py-spy not found: `.venv/bin/pip install py-spy`"
    time.sleep(0.5)
    load(server, args, wrk, max(args.concurrency), args.profile)
    spy.wait(30)
    summary = f"py-spy, c={max(args.concurrency)}, {out.name}: " + profile.summarize(out)
    print(summary, flush=True)
    return summary


# ---- report --------------------------------------------------------------------------------------------


def _point(runs: dict[str, ServerRun], key: str, c: int) -> Point | None:
    run = runs.get(key)
    m = run.points.get(c) if run else None
    return m.point if m else None


def _rps(runs: dict[str, ServerRun], key: str, c: int) -> float | None:
    p = _point(runs, key, c)
    return p.rps if p else None


def _against(
    runs: dict[str, ServerRun], args: argparse.Namespace, new: str, old: str, title: str
) -> list[str]:
    """`new`'s throughput against `old`'s at each concurrency, in percent, and their p99s."""
    lines = ["", f"{title} (throughput, p99):"]
    for c in args.concurrency:
        now, before = _point(runs, new, c), _point(runs, old, c)
        if now and before and before.rps:
            lines.append(
                f"  c={c:<3} {100 * (now.rps / before.rps - 1):+6.1f} %"
                f"   p99 {before.p99_ms:.1f} -> {now.p99_ms:.1f} ms"
            )
    return lines


Verdict = tuple[str, bool | None, str]
"""A target: what it says, MET (True) / NOT MET (False) / not judged (None), and the figures."""


def targets(runs: dict[str, ServerRun]) -> list[Verdict]:
    """Issue 24's targets for blocking sends, and issue 11's, judged from this run's figures."""
    out: list[Verdict] = []
    for c in (16, 64):
        ours, js = _rps(runs, "ours", c), _rps(runs, "js", c)
        what = f"c={c}: ours (PostgreSQL) above the JS SDK's in-memory server"
        if ours is None or js is None:
            out.append((what, None, f"needs ours and js at c={c}"))
        else:
            out.append((what, ours > js, f"{ours:,.0f} vs {js:,.0f} req/s ({ours / js:.2f}x)"))
    p = _point(runs, "ours", 1)
    out.append(
        ("c=1: ours p50 <= 1 ms", None, "needs ours at c=1")
        if p is None
        else ("c=1: ours p50 <= 1 ms", p.p50_ms <= 1.0, f"p50 {p.p50_ms:.2f} ms")
    )
    p = _point(runs, "ours", 64)
    out.append(
        ("c=64: ours p99 <= 50 ms", None, "needs ours at c=64")
        if p is None
        else ("c=64: ours p99 <= 50 ms", p.p99_ms <= 50.0, f"p99 {p.p99_ms:.1f} ms")
    )
    for c in (16, 64):
        p = _point(runs, "sqlite", c)
        what = f"c={c}: ours on SQLite (make run) p99 <= 100 ms"
        out.append(
            (what, None, f"needs sqlite at c={c}")
            if p is None
            else (what, p.p99_ms <= 100.0, f"p99 {p.p99_ms:.1f} ms")
        )
    for c in sorted({c for r in runs.values() for c in r.points}):
        what = f"c={c}: ours' CPU/send at its defaults <= {LOG_COST_MOST:g}x with no access line (issue 39)"
        loud, quiet = (runs[k].points.get(c) if k in runs else None for k in ("ours", "quiet"))
        if loud is None or quiet is None or not quiet.server_cpu_ms:
            out.append((what, None, f"needs ours and quiet at c={c}"))
        else:
            ratio = loud.server_cpu_ms / quiet.server_cpu_ms
            figures = f"{loud.server_cpu_ms:.3f} vs {quiet.server_cpu_ms:.3f} ms ({ratio:.3f}x)"
            out.append((what, ratio <= LOG_COST_MOST, figures))
    ours, ref = _point(runs, "ours", TARGET_CONCURRENCY), _point(runs, "reference", TARGET_CONCURRENCY)
    what = (
        f"c={TARGET_CONCURRENCY}: ours >= {TARGET_RATIO:g}x a2a-sdk's reference server,"
        f" p99 < {TARGET_P99_MS:g} ms"
        " (issue 11)"
    )
    if ours is None or ref is None or not ref.rps:
        out.append((what, None, f"needs ours and reference at c={TARGET_CONCURRENCY}"))
    else:
        ratio = ours.rps / ref.rps
        met = ratio >= TARGET_RATIO and ours.p99_ms < TARGET_P99_MS
        out.append((what, met, f"{ratio:.1f}x, p99 {ours.p99_ms:.1f} ms"))
    return out


def _mark(met: bool | None) -> str:
    return "MET" if met else ("not judged" if met is None else "NOT MET")


def report(runs: dict[str, ServerRun], args: argparse.Namespace, loadgen: str) -> tuple[str, list[Verdict]]:
    """The table, the baseline comparison and the targets."""
    rounds = f", median of {args.rounds} rounds" if args.rounds > 1 else ""
    lines = [
        "message/send (v0.3 JSON-RPC, blocking), echo agent, one process and one worker each;",
        f"{loadgen}, {args.duration:g} s per point after {args.warmup:g} s warm-up{rounds}",
        "",
        f"{'server':<20} {'c':>3} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>10}"
        f" {'vs JS SDK':>9}",
        "-" * 72,
    ]
    for run in runs.values():
        for c in args.concurrency:
            m = run.points.get(c)
            if m is None:
                continue
            p = m.point
            js = _rps(runs, "js", c)
            vs = f"{p.rps / js:8.2f}x" if js else f"{'-':>9}"
            mark = "*" if m.disturbed else " "
            lines.append(
                f"{run.label:<20} {c:>3} {p.rps:9.1f} {p.p50_ms:8.2f} {p.p99_ms:7.1f}{mark}"
                f" {m.server_cpu_ms:10.2f} {vs}"
            )
    if any(m.disturbed for r in runs.values() for m in r.points.values()):
        lines.append("* other processes used the CPU during this point, even after retries")
    if "baseline" in runs and (beside := _beside(args)) in runs:
        label = f"{runs[beside].label} against {runs['baseline'].label}"
        lines += _against(runs, args, beside, "baseline", label)
    if "workers" in runs and "ours" in runs:
        lines += _against(runs, args, "workers", "ours", f"{runs['workers'].label} against one")
    verdicts = targets(runs)
    lines += ["", "targets:"]
    lines += [f"  {_mark(met):>10}  {what}: {detail}" for what, met, detail in verdicts]
    lines.append("")
    for run in runs.values():
        if run.stored:
            stored = ", ".join(f"{s} {n}" for s, n in sorted(run.stored.items()))
            lines.append(f"{run.label}: stored tasks {stored}")
        lines.extend(f"{run.label}: PROBLEM {p}" for p in run.problems)
    return "\n".join(lines), verdicts


def checkout(rev: str) -> tuple[str, Path]:
    """`rev` checked out (detached) in a temporary git worktree of this repository: its commit and path."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--force", str(path), commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return commit, path


def node_version() -> str | None:
    """The Node.js that runs the JS SDK's server (bench/js pins the packages; Node comes from the machine)."""
    try:
        return subprocess.run(
            ["node", "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    wrk = None if args.loadgen == "python" else ensure_wrk()
    if args.loadgen == "wrk" and wrk is None:
        sys.exit("error: wrk is not installed and could not be installed")
    if wrk:
        loadgen = f"wrk -t{args.threads}"
    elif args.loadgen == "python":
        loadgen = "Python load generator (--loadgen python)"
    else:
        loadgen = "Python load generator (wrk could not be installed; this client costs more CPU)"
        print(f"note: {loadgen}", flush=True)
    args.baseline_commit, args.baseline_checkout = checkout(args.baseline) if args.baseline else ("", None)
    runs = {key: ServerRun(key, SERVERS[key][0]) for key in args.servers}
    if args.baseline:
        on = ", SQLite" if args.baseline_on == "sqlite" else ""
        runs["baseline"].label = f"ours@{args.baseline_commit[:9]}{on}"
    if "workers" in runs:
        runs["workers"].label = f"ours, {args.workers} workers"
    scratch = Path(tempfile.mkdtemp(prefix="bench-send-"))
    try:
        for r in range(args.rounds):
            for run in runs.values():
                print(
                    f"{run.label}:" + (f" (round {r + 1} of {args.rounds})" if args.rounds > 1 else ""),
                    flush=True,
                )
                bench_server(run, args, wrk, stamp, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if args.baseline_checkout is not None:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(args.baseline_checkout)],
                cwd=ROOT,
                capture_output=True,
            )
    table, verdicts = report(runs, args, loadgen)
    print()
    print(table)
    out = RESULTS / f"send-{stamp}.json"
    doc = {
        "benchmark": "message/send, blocking, echo agent",
        "time": stamp,
        "config": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "concurrency": args.concurrency,
            "loadgen": loadgen,
            "text": args.text,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "a2a_sdk": metadata.version("a2a-sdk"),
            "node": node_version(),
        },
        "baseline": args.baseline_commit or None,
        "servers": {
            key: {
                "label": run.label,
                "points": {str(c): m.to_json() for c, m in run.points.items()},
                "rounds": {str(c): [m.to_json() for m in ms] for c, ms in run.rounds.items()},
                "stored_tasks": run.stored,
                "problems": run.problems,
                "profile": run.profile,
            }
            for key, run in runs.items()
        },
        "targets": [{"target": what, "met": met, "figures": detail} for what, met, detail in verdicts],
        "table": table,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nraw results: {out}")
    failed = any(p for run in runs.values() for p in run.problems if "other processes" not in p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
