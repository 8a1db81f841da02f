"""SSE responses: `id: <seq>` on every event, keep-alive comments, headers that proxies respect.

When the server shuts down, each stream ends cleanly with a comment telling the client to resubscribe
with `Last-Event-ID` (another replica serves it from the log), instead of being cut mid-response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import orjson
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from app.protocol.model import EventRecord
from app.tasks.service import Snapshot

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
FAREWELL = "server shutting down: resubscribe with Last-Event-ID to continue"
SHUTDOWN_GRACE_S = 1.0


def sse_once(payload: Any) -> Response:
    """An event stream of one event, then its end: an error a streaming method found before its first."""
    body = b"data: " + orjson.dumps(payload) + b"\n\n"
    return Response(body, media_type="text/event-stream", headers=SSE_HEADERS)


async def _abandon(read: asyncio.Future[Any] | None) -> None:
    """End a read nobody will take any more and collect its outcome, so no exception is left unretrieved.

    The read may have finished (the stream's end, `StopAsyncIteration`) just as the client left.
    """
    if read is None:
        return
    read.cancel()
    await asyncio.wait({read})
    if not read.cancelled():
        exc = read.exception()
        if exc is not None and not isinstance(exc, StopAsyncIteration):
            log.warning("a stream whose client had left failed: %r", exc)


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
                read, nxt = nxt, None
                try:
                    item = read.result()
                except StopAsyncIteration:
                    return
                seq = getattr(item, "seq", None)
                yield ServerSentEvent(
                    data=orjson.dumps(encode(item)).decode(), id=None if seq is None else str(seq)
                )
        finally:
            stop.cancel()
            # Shielded: a client that leaves cancels this generator, and the read in flight must still be
            # ended and the items closed (they hold a stream slot and a bus subscription).
            with anyio.CancelScope(shield=True):
                await _abandon(nxt)
                await items.aclose()  # type: ignore[attr-defined]

    return EventSourceResponse(
        frames(),
        headers=SSE_HEADERS,
        ping=keepalive_s,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )
