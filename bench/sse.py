"""A lean SSE client on raw asyncio sockets: cheap enough to hold 10,000 streams in one process.

`SseStream.open(url, body)` POSTs a JSON-RPC request (HTTP/1.1, one connection per stream) and checks the
answer is `200 text/event-stream`; `events()` then yields each complete event (`id:`, `data:` lines; comments
and keep-alives skipped) with the wall-clock time (`time.time_ns()`) at which its last byte was parsed. The
body may be chunked (uvicorn, nginx) or end at EOF. `ended` is True once the server closed the stream
cleanly (the terminating chunk, or EOF without chunking).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class SseError(Exception):
    """The stream could not be opened, or broke mid-way."""


@dataclass(slots=True)
class SseEvent:
    """One SSE event: its `id:` (None when absent), its `data:` text and when it was received (ns)."""

    id: str | None
    data: str
    t_ns: int


def rpc_body(method: str, params: Mapping[str, Any], rid: int | str = 1) -> bytes:
    """A JSON-RPC 2.0 request body."""
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


class SseStream:
    """One SSE response read from a raw socket. Use `await open()`, then `events()`, then `close()`."""

    def __init__(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self.netloc = parts.netloc
        self.body = body
        self.headers = dict(headers or {})
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.chunked = False
        self.ended = False

    async def open(self) -> None:
        """Connect, send the request and read the response head; SseError unless 200 event-stream."""
        try:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
            extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            head = (
                f"POST {self.path} HTTP/1.1\r\nHost: {self.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(self.body)}\r\n{extra}\r\n"
            )
            self.writer.write(head.encode() + self.body)
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            self.close()
            raise SseError(f"opening {self.netloc}{self.path}: {type(exc).__name__}: {exc}") from None
        lines = raw.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if len(status) < 2 or status[1] != "200" or "text/event-stream" not in fields.get("content-type", ""):
            body = b""
            try:
                body = await asyncio.wait_for(self.reader.read(400), 2)
            except (OSError, TimeoutError):
                pass
            self.close()
            raise SseError(f"expected 200 text/event-stream, got {lines[0]!r} {fields} {body[:400]!r}")
        self.chunked = "chunked" in fields.get("transfer-encoding", "").lower()

    async def _chunks(self) -> AsyncIterator[bytes]:
        assert self.reader is not None
        reader = self.reader
        if not self.chunked:
            while data := await reader.read(65536):
                yield data
            self.ended = True
            return
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise SseError("connection closed inside a chunked body")
            size = int(size_line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readline()
                self.ended = True
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]

    async def events(self) -> AsyncIterator[SseEvent]:
        """Each complete event as it arrives; ends when the server ends the stream."""
        buf = b""
        try:
            async for data in self._chunks():
                buf += data
                while True:
                    cut = buf.find(b"\r\n\r\n")
                    sep = 4
                    lf = buf.find(b"\n\n")
                    if lf != -1 and (cut == -1 or lf < cut):
                        cut, sep = lf, 2
                    if cut == -1:
                        break
                    block, buf = buf[:cut], buf[cut + sep :]
                    ev_id: str | None = None
                    data_lines: list[str] = []
                    for line in block.decode().splitlines():
                        if line.startswith("data:"):
                            data_lines.append(line[5:].removeprefix(" "))
                        elif line.startswith("id:"):
                            ev_id = line[3:].strip()
                    if data_lines:
                        yield SseEvent(ev_id, "\n".join(data_lines), time.time_ns())
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise SseError(f"stream broke: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
