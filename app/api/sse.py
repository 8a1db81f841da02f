"""SSE responses: `id: <seq>` on every event, keep-alive comments, headers that proxies respect.

When the server shuts down, each stream ends cleanly with a comment telling the client to resubscribe
with `Last-Event-ID` (another replica serves it from the log), instead of being cut mid-response.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import orjson
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from app.protocol.model import EventRecord
from app.tasks.service import Snapshot

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
FAREWELL = "server shutting down: resubscribe with Last-Event-ID to continue"
SHUTDOWN_GRACE_S = 1.0


def sse_once(payload: Any) -> Response:
    """An event stream of one event, then its end: an error a streaming method found before its first."""
    body = b"data: " + orjson.dumps(payload) + b"\n\n"
    return Response(body, media_type="text/event-stream", headers=SSE_HEADERS)


def sse_response(
    items: AsyncIterator[Snapshot | EventRecord],
    encode: Callable[[Snapshot | EventRecord], Any],
    keepalive_s: float,
) -> EventSourceResponse:
    """Stream `items`, each encoded by `encode` into one line of JSON with its sequence number."""
    shutdown = anyio.Event()

    async def frames() -> AsyncIterator[ServerSentEvent]:
        stop = asyncio.ensure_future(shutdown.wait())
        nxt: asyncio.Future[Snapshot | EventRecord] | None = None
        try:
            while True:
                nxt = asyncio.ensure_future(anext(items))
                await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    yield ServerSentEvent(comment=FAREWELL, retry=500)
                    return
                try:
                    item = nxt.result()
                except StopAsyncIteration:
                    return
                seq = getattr(item, "seq", None)
                yield ServerSentEvent(
                    data=orjson.dumps(encode(item)).decode(), id=None if seq is None else str(seq)
                )
        finally:
            stop.cancel()
            if nxt is not None and not nxt.done():
                nxt.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await nxt
            await items.aclose()  # type: ignore[attr-defined]

    return EventSourceResponse(
        frames(),
        headers=SSE_HEADERS,
        ping=keepalive_s,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )
