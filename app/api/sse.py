"""SSE responses: `id: <seq>` on every event, keep-alive comments, headers that proxies respect."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from sse_starlette.sse import EventSourceResponse, ServerSentEvent

from app.protocol.model import EventRecord
from app.tasks.service import Snapshot

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_response(
    items: AsyncIterator[Snapshot | EventRecord],
    encode: Callable[[Snapshot | EventRecord], Any],
    keepalive_s: float,
) -> EventSourceResponse:
    """Stream `items`, each encoded by `encode` into one line of JSON with its sequence number."""

    async def frames() -> AsyncIterator[ServerSentEvent]:
        try:
            async for item in items:
                yield ServerSentEvent(data=orjson.dumps(encode(item)).decode(), id=str(item.seq))
        finally:
            await items.aclose()  # type: ignore[attr-defined]

    return EventSourceResponse(frames(), headers=SSE_HEADERS, ping=keepalive_s)
