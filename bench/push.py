"""`make bench-push`: push notification throughput, and what a slow webhook costs the sender (nothing).

One server (`a2a-server serve`, echo agent, one worker) on a fresh database (PostgreSQL when
BENCH_POSTGRES_URL is set, else SQLite), and the receiver of `bench.push_receiver` in its own process,
allowlisted through `PUSH_NOTIFICATION_ALLOWED_HOSTS=127.0.0.1`.

1. Throughput: `--tasks` blocking `message/send` calls (`--concurrency` at a time), each registering an
   inline webhook on the fast receiver; each task gives 4 notifications (submitted, working, the
   artifact, completed). Reported: notifications delivered per second between the receiver's first and
   last arrival (target: at least 1,000/s from one replica), and that every one arrived.
2. Latency: `--sends` blocking `message/send` calls one at a time, alternating without a webhook and with
   one whose receiver takes 10 s to answer; p50/p95 of each and their ratio (target: no measurable
   difference, since delivery never sits on the task's path).

Prints a table and saves the figures to bench/results/push-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from .servers import OurServer, create_database, drop_database, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
TARGET_PER_S = 1000.0
NOTIFICATIONS_PER_TASK = 4


class PushServer(OurServer):
    """Ours with the receiver allowlisted and a call timeout above the slow webhook's 10 s."""

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "PUSH_NOTIFICATION_ALLOW_HTTP": "true",
            "PUSH_NOTIFICATION_ALLOWED_HOSTS": "127.0.0.1",
            "PUSH_TIMEOUT_S": "30",
        }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__)
    p.add_argument("--tasks", type=int, default=2000, help="tasks with a fast webhook (throughput)")
    p.add_argument("--concurrency", type=int, default=32, help="sends in flight during the throughput run")
    p.add_argument("--sends", type=int, default=100, help="sends per side in the latency run")
    p.add_argument("--slow-s", type=float, default=10.0, help="how long the slow webhook takes to answer")
    p.add_argument("--quick", action="store_true", help="short run: 500 tasks, 30 sends per side")
    p.add_argument("--postgres-url", default=os.environ.get("BENCH_POSTGRES_URL"))
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.sends = 500, 30
    return args


def message(text: str, hook: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": {
            "kind": "message",
            "messageId": str(uuid.uuid4()),
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
    }
    if hook is not None:
        params["configuration"] = {"pushNotificationConfig": {"url": hook, "token": "bench"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}


async def send(client: httpx.AsyncClient, url: str, text: str, hook: str | None) -> float:
    started = time.perf_counter()
    resp = await client.post(url, json=message(text, hook))
    elapsed = time.perf_counter() - started
    body = resp.json()
    if body.get("result", {}).get("status", {}).get("state") != "completed":
        raise RuntimeError(f"unexpected answer: {body}")
    return elapsed


async def receiver_stats(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    return (await client.get(f"{base}/stats")).json()


async def throughput(server: OurServer, receiver: str, args: argparse.Namespace) -> dict[str, Any]:
    expected = args.tasks * NOTIFICATIONS_PER_TASK
    hook = f"{receiver}/fast"
    async with httpx.AsyncClient(timeout=60) as client:
        queue = iter(range(args.tasks))

        async def worker() -> None:
            for i in queue:
                await send(client, server.rpc_url, f"push {i}", hook)

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        sent_s = time.monotonic() - started
        deadline = time.monotonic() + 120
        stats = await receiver_stats(client, receiver)
        while stats["fast"] < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            stats = await receiver_stats(client, receiver)
    window = (stats["last"] or 0) - (stats["first"] or 0)
    return {
        "tasks": args.tasks,
        "expected": expected,
        "delivered": stats["fast"],
        "window_s": round(window, 3),
        "per_s": round(stats["fast"] / window, 1) if window > 0 else None,
        "send_s": round(sent_s, 3),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def latency(server: OurServer, receiver: str, args: argparse.Namespace) -> dict[str, Any]:
    plain: list[float] = []
    hooked: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(3):
            await send(client, server.rpc_url, "warm-up", None)
        for i in range(args.sends):
            plain.append(await send(client, server.rpc_url, f"plain {i}", None))
            hooked.append(await send(client, server.rpc_url, f"hooked {i}", f"{receiver}/slow"))
        slow = (await receiver_stats(client, receiver))["slow"]
    out: dict[str, Any] = {"sends_per_side": args.sends, "slow_webhook_calls_started": slow}
    for name, values in (("without", plain), ("with_slow_webhook", hooked)):
        out[name] = {"p50_ms": round(pct(values, 0.5), 2), "p95_ms": round(pct(values, 0.95), 2)}
    out["ratio_p50"] = round(out["with_slow_webhook"]["p50_ms"] / out["without"]["p50_ms"], 3)
    out["ratio_p95"] = round(out["with_slow_webhook"]["p95_ms"] / out["without"]["p95_ms"], 3)
    return out


def start_receiver(port: int, slow_s: float, workdir: Path) -> subprocess.Popen[bytes]:
    """The receiver process, once it answers."""
    with open(workdir / "receiver.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.push_receiver", "--port", str(port), "--slow-s", str(slow_s)],
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1)
            return proc
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(
                    f"the bench receiver did not start: see {workdir / 'receiver.log'}"
                ) from None
            time.sleep(0.05)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if args.postgres_url:
        db = await create_database(args.postgres_url, "bench_push")
    else:
        db = f"sqlite+aiosqlite:///{workdir / 'push.db'}"
    port = free_port()
    receiver_url = f"http://127.0.0.1:{port}"
    receiver = await asyncio.to_thread(start_receiver, port, args.slow_s, workdir)
    server = PushServer("ours", db, workdir / "server.log")
    try:
        await asyncio.to_thread(server.prepare)
        await asyncio.to_thread(server.start)
        return {
            "database": "postgresql" if args.postgres_url else "sqlite",
            "throughput": await throughput(server, receiver_url, args),
            "latency": await latency(server, receiver_url, args),
        }
    finally:
        await asyncio.to_thread(server.stop)
        receiver.terminate()
        await asyncio.to_thread(receiver.wait)
        if args.postgres_url:
            await drop_database(args.postgres_url, db)


def report(doc: dict[str, Any]) -> bool:
    t, lat = doc["throughput"], doc["latency"]
    complete = t["delivered"] >= t["expected"]
    met = (t["per_s"] or 0) >= TARGET_PER_S
    print(f"\npush notifications ({doc['database']}, one replica)")
    print(f"  delivered        {t['delivered']}/{t['expected']} {'(all)' if complete else '(MISSING SOME)'}")
    verdict = "met" if met else "missed"
    print(f"  throughput       {t['per_s']}/s over {t['window_s']} s (>= {TARGET_PER_S:.0f}/s: {verdict})")
    print(f"\nmessage/send, blocking, one at a time ({lat['sends_per_side']} per side)")
    print(f"  {'':24} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"  {'without webhook':24} {lat['without']['p50_ms']:>8} {lat['without']['p95_ms']:>8}")
    slow = lat["with_slow_webhook"]
    print(f"  {'with 10 s webhook':24} {slow['p50_ms']:>8} {slow['p95_ms']:>8}")
    print(f"  {'ratio':24} {lat['ratio_p50']:>8} {lat['ratio_p95']:>8}")
    return complete


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    workdir = RESULTS / f"push-{stamp}"
    workdir.mkdir()
    doc = asyncio.run(run(args, workdir))
    ok = report(doc)
    out = RESULTS / f"push-{stamp}.json"
    out.write_text(json.dumps({"args": vars(args), **doc}, indent=2) + "\n")
    print(f"\nraw results: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
