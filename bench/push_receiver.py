"""The webhook receiver of `bench.push`: a bare ASGI app under uvicorn, in its own process.

`POST /fast` answers 204 at once and counts; `POST /slow` answers after `--slow-s` seconds (a webhook that
takes its time); `GET /stats` returns the count and the first and last arrival (monotonic seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson
import uvicorn

STATE: dict[str, Any] = {"fast": 0, "slow": 0, "first": None, "last": None}
SLOW_S = 10.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    path = scope["path"]
    body = b""
    if path == "/stats":
        body = orjson.dumps(STATE)
        status = 200
    elif path == "/fast":
        now = time.monotonic()
        STATE["fast"] += 1
        STATE["first"] = STATE["first"] or now
        STATE["last"] = now
        status = 204
    elif path == "/slow":
        STATE["slow"] += 1
        await asyncio.sleep(SLOW_S)
        status = 204
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
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
