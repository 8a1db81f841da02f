"""SSE responses: `id: <seq>` on every event, keep-alive comments, headers that proxies respect.

When the server shuts down, each stream ends cleanly with a comment telling the client to resubscribe
with `Last-Event-ID` (another replica serves it from the log), instead of being cut mid-response.
"""

from __future__ import annotations

import asyncio
from collections import deque
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


BUFFER = 64
"""Events read ahead of what the client has taken: a reader slower than its task leaves the rest in the
event log (the stream resyncs from it), not in this process."""
BATCH_BYTES = 64 * 1024
"""Most bytes of ready events sent as one body chunk: a reader behind its task (or a fast task) gets them
in a few writes instead of one write per event."""


def frame(item: Snapshot | EventRecord, encode: Callable[[Snapshot | EventRecord], Any]) -> bytes:
    """One SSE event: `id: <seq>` (an event record's) and one line of JSON, as sse-starlette frames it."""
    seq = getattr(item, "seq", None)
    head = b"" if seq is None else b"id: %d\r\n" % seq
    return head + b"data: " + orjson.dumps(encode(item)) + b"\r\n\r\n"


def sse_response(
    items: AsyncIterator[Snapshot | EventRecord],
    encode: Callable[[Snapshot | EventRecord], Any],
    keepalive_s: float,
) -> EventSourceResponse:
    """Stream `items`, each encoded by `encode` into one line of JSON with its sequence number.

    A pump task reads `items` ahead (at most BUFFER of them) while the response sends; what is ready when
    the client can take more goes out in one chunk. One wake-up future per batch, rather than a task and a
    wait per event, is what makes a fast stream cheap. At shutdown what is ready then is sent, then the
    farewell.
    """
    shutdown = anyio.Event()

    async def frames() -> AsyncIterator[bytes | ServerSentEvent]:
        loop = asyncio.get_running_loop()
        ready: deque[bytes] = deque()
        wake: asyncio.Future[None] | None = None
        room: asyncio.Future[None] | None = None
        failure: list[BaseException] = []

        def ring(_: object = None) -> None:
            if wake is not None and not wake.done():
                wake.set_result(None)

        async def pump() -> None:
            nonlocal room
            try:
                async for item in items:
                    ready.append(frame(item, encode))
                    ring()
                    while len(ready) >= BUFFER:
                        room = loop.create_future()
                        await room
            except Exception as exc:
                failure.append(exc)
            finally:
                ring()

        reader = asyncio.create_task(pump())
        reader.add_done_callback(ring)
        stop = asyncio.ensure_future(shutdown.wait())
        stop.add_done_callback(ring)
        try:
            while True:
                if stop.done():
                    if ready:
                        yield b"".join(ready)
                        ready.clear()
                    yield ServerSentEvent(comment=FAREWELL, retry=500)
                    return
                if ready:
                    chunk = [ready.popleft()]
                    size = len(chunk[0])
                    while ready and size < BATCH_BYTES:
                        chunk.append(ready.popleft())
                        size += len(chunk[-1])
                    if room is not None and not room.done():
                        room.set_result(None)
                    yield b"".join(chunk)
                elif reader.done():
                    if failure:
                        raise failure[0]
                    return
                else:
                    wake = loop.create_future()
                    await wake
        finally:
            stop.cancel()
            # Shielded: a client that leaves cancels this generator, and the pump's read in flight must
            # still be ended and the items closed (they hold a stream slot and a bus subscription).
            with anyio.CancelScope(shield=True):
                reader.cancel()
                await asyncio.wait({reader})
                await items.aclose()  # type: ignore[attr-defined]

    return EventSourceResponse(
        frames(),
        headers=SSE_HEADERS,
        ping=keepalive_s,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )
