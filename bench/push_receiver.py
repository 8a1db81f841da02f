"""The webhook receiver of `bench.push`: a bare ASGI app under uvicorn (httptools), in its own process.

`POST /slow` answers 204 after `--slow-s` seconds (a webhook that takes its time); any other `POST /<name>`
answers 204 at once. Each path counts its calls, the distinct bodies among them (a notification delivered
twice counts once: delivery is at least once) and its first and last arrival (monotonic seconds), returned by
`GET /stats`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson
import uvicorn

STATS: dict[str, dict[str, Any]] = {}
SEEN: dict[str, set[int]] = {}
SLOW_S = 10.0


def count(path: str, body: bytes) -> None:
    now = time.monotonic()
    entry = STATS.get(path)
    if entry is None:
        entry = STATS[path] = {"calls": 0, "distinct": 0, "first": now, "last": now}
        SEEN[path] = set()
    entry["calls"] += 1
    entry["last"] = now
    seen = SEEN[path]
    key = hash(body)
    if key not in seen:
        seen.add(key)
        entry["distinct"] += 1


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    path = scope["path"]
    body = b""
    status = 204
    if scope["method"] == "GET" and path == "/stats":
        body = orjson.dumps(STATS)
        status = 200
    elif scope["method"] == "POST":
        count(path, b"".join(chunks))
        if path == "/slow":
            await asyncio.sleep(SLOW_S)
    else:
        status = 404
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    global SLOW_S
    p = argparse.ArgumentParser(prog="python -m bench.push_receiver")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slow-s", type=float, default=10.0)
    args = p.parse_args()
    SLOW_S = args.slow_s
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        loop="uvloop",
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
