"""`make bench`: blocking `message/send` throughput and latency, ours beside a2a-sdk's reference server.

Each server runs alone (one after the other), one uvicorn worker, on its own fresh database on the bench
PostgreSQL (BENCH_POSTGRES_URL). For every concurrency a short warm-up precedes a fixed-time closed-loop
run by wrk (or by a Python fallback when wrk cannot be installed). Before each point the bench waits for
a quiet machine; a point that other processes disturbed anyway is measured again. Answers are checked:
before and after the runs one request through httpx must return a completed task echoing the text,
every answer during the runs must be a completed task, and the stored tasks are counted at the end.
Prints a table and saves the raw figures to bench/results/send-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import httpx

from . import profile
from .cpu import CpuUse, CpuWindow, wait_quiet
from .load import Point, ensure_wrk, run_python, run_wrk
from .servers import (
    OurServer,
    ReferenceServer,
    Server,
    commit_count,
    create_database,
    drop_database,
    task_states,
)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 10.0
TARGET_P99_MS = 150.0
TARGET_CONCURRENCY = 64
QUIET_CORES = 0.25
"""The machine counts as quiet below this many busy cores; a point with more `other` is disturbed."""
SERVERS: dict[str, tuple[str, type[Server]]] = {
    "ours": ("ours", OurServer),
    "reference": ("a2a-sdk 1.3.0", ReferenceServer),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m bench.send", description=__doc__)
    p.add_argument("--duration", type=float, default=float(env("BENCH_DURATION", "10")), help="s/point")
    p.add_argument("--warmup", type=float, default=float(env("BENCH_WARMUP", "2")), help="s/point")
    p.add_argument("--concurrency", default=env("BENCH_CONCURRENCY", "1,16,64"), help="e.g. 1,16,64")
    p.add_argument("--servers", default=env("BENCH_SERVERS", "ours,reference"), help="ours,reference")
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
    unknown = set(args.servers) - set(SERVERS)
    if unknown:
        p.error(f"unknown server(s) {sorted(unknown)}; choose from {sorted(SERVERS)}")
    return args


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
    points: dict[int, Measured] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    warmup_failures: int = 0
    problems: list[str] = field(default_factory=list)
    profile: str = ""


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
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": str(uuid.uuid4()),
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
            }
        },
    }
    r = httpx.post(server.rpc_url, json=body, timeout=30)
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
        commits0 = asyncio.run(commit_count(server.database_url))
        window = CpuWindow(server.pids, server.cpu_groups)
        t0 = time.monotonic()
        point = load(server, args, wrk, c, args.duration)
        cpu = window.stop()
        wall = time.monotonic() - t0
        commits = asyncio.run(commit_count(server.database_url)) - commits0
        m = Measured(point, cpu, commits / wall, attempt)
        if best is None or m.cpu.other < best.cpu.other:
            best = m
        if not m.disturbed:
            break
        print(f"    c={c}: disturbed ({m.cpu.other:.2f} cores used by other processes), measuring again")
    assert best is not None
    return best


def bench_server(key: str, args: argparse.Namespace, wrk: str | None, stamp: str) -> ServerRun:
    label, cls = SERVERS[key]
    run = ServerRun(key, label)
    db = asyncio.run(create_database(args.postgres_url, f"bench_{key}"))
    server = cls(label, db, RESULTS / f"send-{stamp}-{key}.log")
    try:
        server.prepare()
        server.start()
        send_once(server, args.text)
        for c in args.concurrency:
            m = measure(server, args, wrk, c)
            run.points[c] = m
            p, u = m.point, m.cpu
            print(
                f"  {label:>14} c={c:<3} {p.rps:8.1f} req/s  p50 {p.p50_ms:7.1f} ms  p99 {p.p99_ms:7.1f} ms"
                f"  | cores: server {u.server:.2f} postgres {u.postgres:.2f} loadgen {u.loadgen:.2f}"
                f" other {u.other:.2f} | server CPU {m.server_cpu_ms:.2f} ms/req"
                f" | {m.commits_per_s:.0f} commits/s" + (f"  FAILURES {p.failures}" if p.failures else ""),
                flush=True,
            )
            if p.failures:
                run.problems.append(f"c={c}: {p.failures} failed ({p.errors}, bad {p.bad}): {p.sample[:300]}")
            if m.disturbed:
                run.problems.append(f"c={c}: other processes used {u.other:.2f} cores during the point")
        if args.profile > 0 and key == "ours":
            run.profile = profile_pass(server, args, wrk, stamp)
        send_once(server, args.text)
        time.sleep(1)
        run.stored = asyncio.run(task_states(db))
    finally:
        server.stop()
        if not args.keep_db:
            asyncio.run(drop_database(args.postgres_url, db))
    unfinished = {s: n for s, n in run.stored.items() if s not in ("completed", "TASK_STATE_COMPLETED")}
    if unfinished:
        run.problems.append(f"stored tasks not completed: {unfinished}")
    answered = sum(m.point.requests for m in run.points.values())
    if sum(run.stored.values()) < answered:
        run.problems.append(f"{sum(run.stored.values())} tasks stored for {answered} answered requests")
    return run


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


def _cells(m: Measured | None) -> str:
    if m is None:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    p = m.point
    mark = "*" if m.disturbed else " "
    return f"{p.rps:8.1f} {p.p50_ms:8.1f} {p.p99_ms:7.1f}{mark}"


def report(runs: dict[str, ServerRun], args: argparse.Namespace, loadgen: str) -> tuple[str, bool | None]:
    """The table and the target verdict (None when it cannot be judged from this run)."""
    ours, ref = runs.get("ours"), runs.get("reference")
    lines = [
        "message/send (v0.3 JSON-RPC, blocking), echo agent, PostgreSQL, one uvicorn worker each;",
        f"{loadgen}, {args.duration:g} s per point after {args.warmup:g} s warm-up",
        "",
        f"{'':>11} | {'ours':^26} | {'a2a-sdk 1.3.0 reference':^26} |",
        f"{'concurrency':>11} | {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} | "
        f"{'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} | {'ratio req/s':>11}",
        "-" * 11 + "-+-" + "-" * 26 + "-+-" + "-" * 26 + "-+-" + "-" * 11,
    ]
    for c in args.concurrency:
        mo = ours.points.get(c) if ours else None
        mr = ref.points.get(c) if ref else None
        ratio = f"{mo.point.rps / mr.point.rps:10.1f}x" if mo and mr and mr.point.rps else f"{'-':>11}"
        lines.append(f"{c:>11} | {_cells(mo)} | {_cells(mr)} | {ratio}")
    if any(m.disturbed for r in runs.values() for m in r.points.values()):
        lines.append("* other processes used the CPU during this point, even after retries")
    verdict: bool | None = None
    mo = ours.points.get(TARGET_CONCURRENCY) if ours else None
    mr = ref.points.get(TARGET_CONCURRENCY) if ref else None
    lines.append("")
    goal = (
        f"target at c={TARGET_CONCURRENCY}: >= {TARGET_RATIO:g}x reference throughput "
        f"and p99 < {TARGET_P99_MS:g} ms"
    )
    if mo and mr and mr.point.rps:
        ratio = mo.point.rps / mr.point.rps
        verdict = ratio >= TARGET_RATIO and mo.point.p99_ms < TARGET_P99_MS
        met = "MET" if verdict else "NOT MET"
        lines.append(f"{goal}: {met} (ratio {ratio:.1f}x, our p99 {mo.point.p99_ms:.1f} ms)")
    else:
        lines.append(f"{goal}: not judged (both servers at c={TARGET_CONCURRENCY} are needed)")
    for run in runs.values():
        stored = ", ".join(f"{s} {n}" for s, n in sorted(run.stored.items()))
        lines.append(f"{run.label}: stored tasks {stored or 'none'}")
        lines.extend(f"{run.label}: PROBLEM {p}" for p in run.problems)
    return "\n".join(lines), verdict


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
    runs: dict[str, ServerRun] = {}
    for key in args.servers:
        print(f"{SERVERS[key][0]}:", flush=True)
        runs[key] = bench_server(key, args, wrk, stamp)
    table, verdict = report(runs, args, loadgen)
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
        },
        "servers": {
            key: {
                "label": run.label,
                "points": {str(c): m.to_json() for c, m in run.points.items()},
                "stored_tasks": run.stored,
                "problems": run.problems,
                "profile": run.profile,
            }
            for key, run in runs.items()
        },
        "target": {
            "concurrency": TARGET_CONCURRENCY,
            "min_ratio": TARGET_RATIO,
            "max_p99_ms": TARGET_P99_MS,
            "met": verdict,
        },
        "table": table,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nraw results: {out}")
    failed = any(p for run in runs.values() for p in run.problems if "other processes" not in p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
