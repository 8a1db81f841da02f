"""The floor under a cross-replica delay: the same hops a chunk takes, without the server.

A chunk read on replica B while replica A runs its task goes: A commits it to PostgreSQL, publishes it on
Redis, B hears it and writes it to its reader's HTTP response. This probe does just that, paced like the
propagation section (one chunk every `interval_ms`): the bench process commits a one-row INSERT, PUBLISHes
the stamp, and a relay in a process of its own (`python -m bench.floor REDIS_URL PORT`, standing in for B)
writes every message it hears to a TCP connection the bench reads. What this floor takes on this machine,
the server cannot beat; the server's figure minus it is what the server's own code and its process hops
(A's event loop, B's stream) add.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from .servers import free_port
from .streams import percentile

CHANNEL = "bench:floor"
ROOT = Path(__file__).resolve().parent.parent


async def relay(redis_url: str, port: int) -> None:
    """B's stand-in: accept one reader, then write each message of CHANNEL to it as a line."""
    done = asyncio.Event()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        redis = Redis.from_url(redis_url)
        pubsub = redis.pubsub()
        await pubsub.subscribe(CHANNEL)
        writer.write(b"ready\n")
        await writer.drain()
        async for msg in pubsub.listen():
            if msg["type"] != "message":
                continue
            if msg["data"] == b"end":
                break
            writer.write(b"data: " + msg["data"] + b"\n")
            await writer.drain()
        writer.close()
        await pubsub.aclose()
        await redis.aclose()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await done.wait()


async def probe(pg_url: str, redis_url: str, count: int, interval_ms: float) -> dict[str, float]:
    """Commit, publish, relay, receive: `count` stamps `interval_ms` apart; delay percentiles in ms, and the
    commit's own."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.floor", redis_url, str(port), cwd=ROOT, stdout=asyncio.subprocess.DEVNULL
    )
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    redis = Redis.from_url(redis_url)
    try:
        reader, writer = await _connect(port)
        assert await reader.readline() == b"ready\n"
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_floor_probe (x bigint)")
        sent: dict[int, float] = {}
        delays: list[float] = []
        commits: list[float] = []

        async def receive() -> None:
            while len(delays) < count:
                line = await reader.readline()
                if not line:
                    return
                stamp = int(line.removeprefix(b"data: "))
                delays.append((time.perf_counter() - sent[stamp]) * 1000)

        receiving = asyncio.create_task(receive())
        for stamp in range(count):
            started = time.perf_counter()
            sent[stamp] = started
            await conn.execute("INSERT INTO bench_floor_probe VALUES ($1)", stamp)
            commits.append((time.perf_counter() - started) * 1000)
            await redis.publish(CHANNEL, str(stamp))
            await asyncio.sleep(max(0.0, interval_ms / 1000 - (time.perf_counter() - started)))
        await asyncio.wait_for(receiving, 10)
        await redis.publish(CHANNEL, "end")
        writer.close()
        await conn.execute("DROP TABLE bench_floor_probe")
    finally:
        await conn.close()
        await redis.aclose()
        proc.terminate()
        await proc.wait()
    return {
        "samples": len(delays),
        "p50_ms": round(percentile(delays, 50), 2),
        "p99_ms": round(percentile(delays, 99), 2),
        "commit_p50_ms": round(percentile(commits, 50), 3),
        "commit_p99_ms": round(percentile(commits, 99), 3),
    }


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    deadline = time.monotonic() + 10
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


if __name__ == "__main__":
    asyncio.run(relay(sys.argv[1], int(sys.argv[2])))
