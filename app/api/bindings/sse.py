"""SSE responses: `id: <seq>` on every event, keep-alive comments, headers that proxies respect.

When the server shuts down, each stream ends cleanly with a comment telling the client to resubscribe
with `Last-Event-ID` (another replica serves it from the log), instead of being cut mid-response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import orjson
from sse_starlette.event import ServerSentEvent, ensure_bytes
from sse_starlette.sse import EventSourceResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.protocol.events import EventRecord
from app.tasks.service import Snapshot

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
FAREWELL = "server shutting down: resubscribe with Last-Event-ID to continue"


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


class _Closing:
    """The server is shutting down: one watcher per event loop rings every open stream, so a stream costs
    no task of its own for it. The signal is sse-starlette's (it hooks uvicorn's exit handler, also in
    each of `WORKERS` processes)."""

    def __init__(self) -> None:
        self.set = False
        self.rings: set[Callable[[], None]] = set()

    async def watch(self) -> None:
        await EventSourceResponse._listen_for_exit_signal()
        self.set = True
        for ring in list(self.rings):
            ring()


_closing: dict[asyncio.AbstractEventLoop, _Closing] = {}


def closing(loop: asyncio.AbstractEventLoop) -> _Closing:
    """This loop's shutdown signal, its watcher started on first use."""
    c = _closing.get(loop)
    if c is None:
        c = _closing[loop] = _Closing()
        watcher = loop.create_task(c.watch(), name="sse-shutdown-watcher")
        watcher.add_done_callback(lambda _: _closing.pop(loop, None))
    return c


def _ping() -> bytes:
    return b": ping - %s\r\n\r\n" % str(datetime.now(UTC)).encode()


_FAREWELL = ensure_bytes(ServerSentEvent(comment=FAREWELL, retry=500), "\r\n")


class _Stream:
    """What one open stream holds: the frames read ahead (a list: at most BUFFER, and an empty one is a
    tenth of an empty deque), and the one future the sender waits on."""

    __slots__ = ("failure", "loop", "ping_due", "ready", "room", "wake")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: list[bytes] = []
        self.wake: asyncio.Future[None] | None = None
        self.room: asyncio.Future[None] | None = None
        self.ping_due = False
        self.failure: BaseException | None = None

    def ring(self, _: object = None) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    def due(self) -> None:
        self.ping_due = True
        self.ring()

    async def pump(
        self, items: AsyncIterator[Snapshot | EventRecord], encode: Callable[[Snapshot | EventRecord], Any]
    ) -> None:
        """Read `items` ahead, at most BUFFER frames: a slower client leaves the rest in the event log."""
        try:
            async for item in items:
                self.ready.append(frame(item, encode))
                self.ring()
                while len(self.ready) >= BUFFER:
                    self.room = self.loop.create_future()
                    await self.room
        except Exception as exc:
            self.failure = exc

    def take(self) -> bytes:
        """The frames ready now, up to BATCH_BYTES (at least one), as one body chunk."""
        ready = self.ready
        size = n = 0
        while n < len(ready) and size < BATCH_BYTES:
            size += len(ready[n])
            n += 1
        chunk = ready[:n]
        del ready[:n]
        if self.room is not None and not self.room.done():
            self.room.set_result(None)
        return b"".join(chunk)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class SseResponse(Response):
    """Stream `items`, each encoded by `encode` into one line of JSON with its sequence number.

    A pump task reads `items` ahead while the response sends; what is ready when the client can take more
    goes out in one chunk. Besides the request's own task a stream has two: the pump, and one waiting for
    the client to leave; keep-alives are a timer and shutdown one watcher for all streams. (sse-starlette's
    response, which this replaced, spent six tasks and a task group per stream: most of a held stream's
    memory.) At shutdown what is ready then is sent, then the farewell.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        items: AsyncIterator[Snapshot | EventRecord],
        encode: Callable[[Snapshot | EventRecord], Any],
        keepalive_s: float,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers({**SSE_HEADERS, "Connection": "keep-alive"})
        self.items = items
        self.encode = encode
        self.keepalive_s = keepalive_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if scope.get("method") == "HEAD":
            await self.items.aclose()  # type: ignore[attr-defined]
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        loop = asyncio.get_running_loop()
        s = _Stream(loop)
        pump = loop.create_task(s.pump(self.items, self.encode))
        pump.add_done_callback(s.ring)
        left = loop.create_task(_until_disconnect(receive))
        left.add_done_callback(s.ring)
        shutdown = closing(loop)
        shutdown.rings.add(s.ring)
        timer = loop.call_later(self.keepalive_s, s.due)
        try:
            while not left.done():
                if shutdown.set:
                    body = b"".join(s.ready) + _FAREWELL
                    s.ready.clear()
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
                if s.ready:
                    await send({"type": "http.response.body", "body": s.take(), "more_body": True})
                elif pump.done():
                    if s.failure is not None:
                        raise s.failure
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                elif s.ping_due:
                    s.ping_due = False
                    timer = loop.call_later(self.keepalive_s, s.due)
                    await send({"type": "http.response.body", "body": _ping(), "more_body": True})
                else:
                    s.wake = loop.create_future()
                    await s.wake
        finally:
            timer.cancel()
            shutdown.rings.discard(s.ring)
            if left.done() and not left.cancelled():
                left.exception()  # retrieved: a receive that failed ends the stream like a disconnect
            left.cancel()
            # Shielded: a request cancelled mid-stream must still end the pump's read in flight and close
            # the items (they hold a stream slot and a bus subscription).
            with anyio.CancelScope(shield=True):
                pump.cancel()
                await asyncio.wait({pump})
                await self.items.aclose()  # type: ignore[attr-defined]
