"""Load generators for blocking `message/send`: wrk with bench/send.lua, or a lean Python fallback.

Both keep `concurrency` keep-alive connections busy for a fixed time, each sending the next request as
soon as the previous answer arrives (a closed loop), with a unique messageId per request, and report the
same `Point`: request count, duration, latency percentiles, transport errors and bad answers (anything but
HTTP 200 with a completed task and no JSON-RPC error).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

LUA = Path(__file__).resolve().parent / "send.lua"


@dataclass
class Point:
    """One measurement at one concurrency. Latencies in milliseconds."""

    concurrency: int
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    errors: dict[str, int] = field(default_factory=dict)
    bad: int = 0
    sample: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    @property
    def failures(self) -> int:
        return self.bad + sum(self.errors.values())

    def to_json(self) -> dict[str, Any]:
        out = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return {**out, "rps": round(self.rps, 1)}


def ensure_wrk() -> str | None:
    """wrk's path, installing Debian's package when missing and we are root; None if not to be had."""
    path = shutil.which("wrk")
    if path or os.geteuid() != 0 or not shutil.which("apt-get"):
        return path
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "wrk"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=False)
    return shutil.which("wrk")


def run_wrk(
    wrk: str, url: str, concurrency: int, duration_s: float, threads: int, nonce: str, text: str
) -> Point:
    """One wrk run; its Lua `done` prints the figures as JSON."""
    cmd = [
        wrk,
        f"-t{min(threads, concurrency)}",
        f"-c{concurrency}",
        f"-d{max(1, round(duration_s))}s",
        "--timeout",
        "30s",
        "-s",
        str(LUA),
        url,
        "--",
        nonce,
        text,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    result: dict[str, Any] | None = None
    sample = ""
    for line in out.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            result = json.loads(line.removeprefix("BENCH_RESULT "))
        elif line.startswith("BENCH_SAMPLE "):
            sample = line.removeprefix("BENCH_SAMPLE ")
    if result is None:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    lat = result["latency_us"]
    return Point(
        concurrency=concurrency,
        requests=result["requests"],
        duration_s=result["duration_us"] / 1e6,
        p50_ms=lat["p50"] / 1000,
        p90_ms=lat["p90"] / 1000,
        p99_ms=lat["p99"] / 1000,
        mean_ms=lat["mean"] / 1000,
        max_ms=lat["max"] / 1000,
        errors={k: v for k, v in result["errors"].items() if v},
        bad=result["bad"],
        sample=sample,
    )


# ---- Python fallback ----------------------------------------------------------------------------------


def _body(nonce: str, seq: int, text: str) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": seq,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": f"{nonce}-{seq}",
                    "role": "user",
                    "parts": [{"kind": "text", "text": text}],
                }
            },
        }
    ).encode()


def _good(status: int, body: bytes) -> bool:
    if status != 200:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return "error" not in doc and doc.get("result", {}).get("status", {}).get("state") == "completed"


async def _connection(url: str, nonce: str, text: str, end: float, out: dict[str, Any]) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
    seq = 0
    try:
        while time.monotonic() < end:
            seq += 1
            body = _body(nonce, seq, text)
            t0 = time.perf_counter()
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            payload = await reader.readexactly(length)
            out["latencies"].append(time.perf_counter() - t0)
            if not _good(status, payload):
                out["bad"] += 1
                out["sample"] = out["sample"] or f"{status} {payload[:400]!r}"
    except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
        out["errors"] += 1
    finally:
        writer.close()


def _worker(url: str, connections: int, duration_s: float, nonce: str, text: str) -> dict[str, Any]:
    out: dict[str, Any] = {"latencies": [], "bad": 0, "errors": 0, "sample": ""}

    async def main() -> None:
        end = time.monotonic() + duration_s
        await asyncio.gather(*(_connection(url, f"{nonce}-{i}", text, end, out) for i in range(connections)))

    asyncio.run(main())
    return out


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q / 100 * len(sorted_values)))]


def run_python(url: str, concurrency: int, duration_s: float, nonce: str, text: str) -> Point:
    """The fallback when wrk cannot be installed: up to one process per core, asyncio sockets in each."""
    procs = max(1, min(concurrency, os.cpu_count() or 1))
    shares = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    start = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        parts = pool.starmap(
            _worker, [(url, n, duration_s, f"{nonce}-p{i}", text) for i, n in enumerate(shares)]
        )
    elapsed = time.monotonic() - start
    lat = sorted(x * 1000 for p in parts for x in p["latencies"])
    errors = sum(p["errors"] for p in parts)
    return Point(
        concurrency=concurrency,
        requests=len(lat),
        duration_s=min(elapsed, duration_s) if lat else elapsed,
        p50_ms=_percentile(lat, 50),
        p90_ms=_percentile(lat, 90),
        p99_ms=_percentile(lat, 99),
        mean_ms=sum(lat) / len(lat) if lat else 0.0,
        max_ms=lat[-1] if lat else 0.0,
        errors={"connection": errors} if errors else {},
        bad=sum(p["bad"] for p in parts),
        sample=next((p["sample"] for p in parts if p["sample"]), ""),
    )
