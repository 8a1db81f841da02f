"""`SseResponse` driven as an ASGI app in this process: what it sends, and that its items are always closed
(they hold a stream slot and a bus subscription) however the stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from app.api.bindings.sse import BUFFER, SseResponse
from app.protocol.events import EventRecord


class Items:
    """`n` records (`None`: never-ending), then the end; records whether the stream closed them (ran out, or
    `aclose`, which the stream's real items answer by freeing its slot even unstarted)."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.read = 0
        self.closed = False
        self._gen = self._run()

    async def _run(self) -> AsyncIterator[Any]:
        try:
            while self.n is None or self.read < self.n:
                self.read += 1
                yield EventRecord(self.read, None)  # type: ignore[arg-type]
                await asyncio.sleep(0 if self.n is not None else 3600)
        finally:
            self.closed = True

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._gen

    async def __anext__(self) -> Any:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()
        self.closed = True


class Client:
    """The ASGI side of one request: what was sent, and a disconnect given on demand."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.gone = asyncio.Event()
        self.fail_receive = False

    async def receive(self) -> dict[str, Any]:
        if self.fail_receive:
            raise RuntimeError("the server's receive broke")
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    @property
    def ended(self) -> bool:
        return self.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def response(items: Items, keepalive_s: float = 60.0) -> SseResponse:
    return SseResponse(items, lambda it: {"n": it.seq}, keepalive_s)  # type: ignore[arg-type]


async def serve(r: SseResponse, client: Client, method: str = "POST") -> None:
    await asyncio.wait_for(r({"type": "http", "method": method}, client.receive, client.send), 10)


async def test_every_item_goes_out_with_its_id_then_the_stream_ends() -> None:
    items, client = Items(3 * BUFFER), Client()
    await serve(response(items), client)
    start = client.messages[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    expected = b"".join(b'id: %d\r\ndata: {"n":%d}\r\n\r\n' % (n, n) for n in range(1, 3 * BUFFER + 1))
    assert client.body == expected
    assert client.ended and items.closed


async def test_a_client_that_leaves_ends_the_stream_and_closes_its_items() -> None:
    items, client = Items(None), Client()
    serving = asyncio.create_task(serve(response(items), client))
    while items.read == 0:
        await asyncio.sleep(0.01)
    client.gone.set()
    await serving
    assert items.closed and b'data: {"n":1}' in client.body


async def test_keep_alive_comments_while_nothing_happens() -> None:
    items, client = Items(None), Client()
    serving = asyncio.create_task(serve(response(items, keepalive_s=0.05), client))
    while client.body.count(b": ping - ") < 2:
        await asyncio.sleep(0.02)
    client.gone.set()
    await serving
    assert items.closed


async def test_head_sends_the_headers_and_no_stream() -> None:
    items, client = Items(None), Client()
    await serve(response(items), client, method="HEAD")
    assert client.body == b"" and client.ended
    assert items.read == 0 and items.closed


async def test_a_failing_receive_ends_the_stream_and_closes_its_items() -> None:
    items, client = Items(None), Client()
    client.fail_receive = True
    await serve(response(items), client)
    assert items.closed
