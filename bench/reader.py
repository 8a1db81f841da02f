"""A reader slower than its task (issue 24): the replica's memory while one `tasks/resubscribe` stream
reads a `chunks:<n>` task as fast as it can, or 64 KiB every 20 ms.

A lagging reader should cost a bounded amount of memory: what it has not read yet is in the event log, and
the replica reads it back a page at a time (app/tasks/follow.py `_replay`), so the slow reader's growth should
be the fast reader's (the live task's artifact, which holds every chunk) plus a few buffers.

The reader is a raw socket, not asyncio's StreamReader (which reads ahead up to 2 MiB whatever the caller
takes): the slow one sets a 64 KiB SO_RCVBUF before it connects (which turns receive-buffer autotuning
off), so the kernel stops accepting bytes soon after it stops reading and the replica really has to hold
back. Every event is checked: SSE ids run on by one, every `chunk-<i> ` text arrives once and in order (in
the first snapshot or in an artifact update), and the stream ends with `completed`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from .sse import rpc_body
from .streams import RPC_PATH, TERMINAL, start_task

SLOW_READ = 64 * 1024
"""Bytes the slow reader takes from its socket at once (issue 24's reader)."""
SLOW_PAUSE_S = 0.02
"""The slow reader's pause between reads: at most 3.2 MB/s, about 10,000 events/s of `chunk-<i> ` updates."""
SLOW_RCVBUF = 64 * 1024
"""The slow reader's socket receive buffer, so the kernel holds little of its lag either."""
FAST_READ = 1 << 20
SAMPLE_S = 0.1
"""How often the replica's VmRSS and the task's stored state are read."""
_CHUNK = re.compile(rb'"text":"chunk-(\d+) "')
_STATE = re.compile(rb'"state":"([a-z-]+)"')
_SEP = b"\r\n\r\n"


class Dechunker:
    """HTTP/1.1 chunked transfer decoding, fed whatever the socket gave."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.left = 0
        """Data bytes of the current chunk still due (>0), the CRLF after it (<0), or a size line (0)."""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self.buf
        buf += data
        out = bytearray()
        pos = 0
        while pos < len(buf) and not self.done:
            if self.left > 0:
                take = min(self.left, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                self.left -= take
                if self.left == 0:
                    self.left = -2
            elif self.left < 0:
                take = min(-self.left, len(buf) - pos)
                pos += take
                self.left += take
            else:
                eol = buf.find(b"\r\n", pos)
                if eol == -1:
                    break
                size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
                pos = eol + 2
                if size == 0:
                    self.done = True
                self.left = size
        del buf[:pos]
        return bytes(out)


@dataclass
class ReadResult:
    """What one reader got, and what the replica's memory did meanwhile."""

    reader: str
    task_id: str = ""
    chunks: int = 0
    events: int = 0
    """Complete SSE events with data, the first snapshot included."""
    chunk_texts: int = 0
    bytes_read: int = 0
    first_seq: int = -1
    last_seq: int = -1
    final_state: str | None = None
    ended: bool = False
    seconds: float = 0.0
    """From the send to the end of the stream."""
    task_s: float = 0.0
    """From the send to the first poll that found the task's row terminal."""
    seq_at_done: int = 0
    """The stored `last_seq` when the task was first found terminal."""
    read_seq_at_done: int = 0
    """The last SSE id the reader had parsed then."""
    bytes_at_done: int = 0
    rss_baseline_kib: int = 0
    rss_peak_kib: int = 0
    """The largest VmRSS sampled."""
    hwm_kib: int = 0
    """The replica's VmHWM at the end (the process was started for this reader)."""
    rss_end_kib: int = 0
    rss_after_kib: int = 0
    """A second after the stream ended (the task has left the live tasks by then)."""
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    """(s since the send, VmRSS KiB, the reader's last SSE id)."""
    problems: list[str] = field(default_factory=list)

    @property
    def lag_events(self) -> int:
        return max(self.seq_at_done - self.read_seq_at_done, 0)

    @property
    def lag_s(self) -> float:
        return max(self.seconds - self.task_s, 0.0)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def peak_kib(self) -> int:
        return max(self.rss_peak_kib, self.hwm_kib)

    @property
    def growth_kib(self) -> int:
        return self.peak_kib - self.rss_baseline_kib

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in vars(self).items() if k != "samples"}
        doc.update(
            lag_events=self.lag_events,
            lag_s=round(self.lag_s, 2),
            events_per_s=round(self.events_per_s, 1),
            peak_kib=self.peak_kib,
            growth_kib=self.growth_kib,
            samples=self.samples[:: max(1, len(self.samples) // 600)],
        )
        return doc


def memory(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM (KiB) of a process, from /proc/<pid>/status."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith(b"VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


class _Stream:
    """One resubscribe response on a raw non-blocking socket, parsed as it arrives."""

    def __init__(self, rd: ReadResult) -> None:
        self.rd = rd
        self.dechunk = Dechunker()
        self.pending = b""
        self.next_chunk = 0

    def take(self, body: bytes) -> None:
        """Complete events in `body` (after de-chunking): ids, chunk texts and states checked."""
        rd = self.rd
        blocks = (self.pending + body).split(_SEP)
        self.pending = blocks.pop()
        for block in blocks:
            if block.startswith(b":"):
                continue  # a keep-alive or the farewell comment
            if not block.startswith(b"id: "):
                if b"data:" in block:
                    rd.problems.append(f"event without an SSE id: {block[:200]!r}")
                continue
            seq = int(block[4 : block.index(b"\r\n")])
            if rd.last_seq >= 0 and seq != rd.last_seq + 1 and not rd.problems:
                rd.problems.append(f"event id {seq} where {rd.last_seq + 1} was due")
            if rd.first_seq < 0:
                rd.first_seq = seq
            rd.last_seq = seq
            rd.events += 1
            nums = _CHUNK.findall(block)
            if nums:
                want = self.next_chunk
                if [int(n) for n in nums] != list(range(want, want + len(nums))) and not rd.problems:
                    rd.problems.append(f"chunk texts {nums[:3]}... where chunk-{want} was due")
                self.next_chunk += len(nums)
                rd.chunk_texts += len(nums)
            if b'"state":"' in block:
                rd.final_state = _STATE.findall(block)[-1].decode()


async def _open(url: str, task_id: str, rcvbuf: int | None) -> tuple[socket.socket, bytes]:
    """Connect (with `rcvbuf` set first), POST `tasks/resubscribe`; the socket and the body bytes read
    past the response head. Raises unless the answer is 200 text/event-stream, chunked."""
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        await loop.sock_connect(sock, (parts.hostname or "127.0.0.1", parts.port or 80))
        body = rpc_body("tasks/resubscribe", {"id": task_id})
        head = (
            f"POST {RPC_PATH} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        await loop.sock_sendall(sock, head.encode() + body)
        raw = b""
        while b"\r\n\r\n" not in raw:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise RuntimeError(f"connection closed before the response head: {raw[:300]!r}")
            raw += data
    except BaseException:
        sock.close()
        raise
    head_bytes, _, rest = raw.partition(b"\r\n\r\n")
    text = head_bytes.decode("latin-1").lower()
    if not text.startswith("http/1.1 200") or "text/event-stream" not in text or "chunked" not in text:
        sock.close()
        raise RuntimeError(f"expected a chunked 200 text/event-stream, got {head_bytes[:300]!r}")
    return sock, rest


async def _watch(
    pid: int, db_url: str, rd: ReadResult, t0: float, stop: asyncio.Event, task_id: asyncio.Future[str]
) -> None:
    """Every SAMPLE_S: the replica's VmRSS, and (once) when the task's stored state turns terminal."""
    conn = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        while not stop.is_set():
            rss, _ = memory(pid)
            rd.rss_peak_kib = max(rd.rss_peak_kib, rss)
            rd.samples.append((round(time.monotonic() - t0, 2), rss, rd.last_seq))
            if task_id.done() and not rd.task_s:
                row = await conn.fetchrow("SELECT state, last_seq FROM tasks WHERE id = $1", task_id.result())
                if row is not None and str(row["state"]).lower() in TERMINAL:
                    rd.task_s = time.monotonic() - t0
                    rd.seq_at_done = int(row["last_seq"])
                    rd.read_seq_at_done = rd.last_seq
                    rd.bytes_at_done = rd.bytes_read
            try:
                await asyncio.wait_for(stop.wait(), SAMPLE_S)
            except TimeoutError:
                pass
    finally:
        await conn.close()


async def read_task(
    base_url: str, pid: int, db_url: str, chunks: int, slow: bool, timeout_s: float
) -> ReadResult:
    """Send `chunks:<chunks>` (non-blocking) to the replica, resubscribe at once and read the stream to
    its end, fast or slow, sampling the replica's memory from just before the send to a second after."""
    rd = ReadResult("slow" if slow else "fast", chunks=chunks)
    rd.rss_baseline_kib = memory(pid)[0]
    t0 = time.monotonic()
    stop = asyncio.Event()
    task_id: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    watcher = asyncio.create_task(_watch(pid, db_url, rd, t0, stop, task_id))
    loop = asyncio.get_running_loop()
    sock: socket.socket | None = None
    try:
        async with asyncio.timeout(timeout_s):
            async with httpx.AsyncClient(timeout=30) as client:
                rd.task_id = await start_task(client, base_url, f"chunks:{chunks}")
            task_id.set_result(rd.task_id)
            sock, rest = await _open(base_url, rd.task_id, SLOW_RCVBUF if slow else None)
            stream = _Stream(rd)
            rd.bytes_read = len(rest)
            stream.take(stream.dechunk.feed(rest))
            size = SLOW_READ if slow else FAST_READ
            while not stream.dechunk.done:
                if slow:
                    await asyncio.sleep(SLOW_PAUSE_S)
                data = await loop.sock_recv(sock, size)
                if not data:
                    break
                rd.bytes_read += len(data)
                stream.take(stream.dechunk.feed(data))
            rd.ended = stream.dechunk.done
            rd.seconds = time.monotonic() - t0
            rd.rss_end_kib = memory(pid)[0]
            await asyncio.sleep(1)
    except (TimeoutError, OSError, RuntimeError) as exc:
        rd.problems.append(f"{type(exc).__name__}: {exc}")
        rd.seconds = rd.seconds or time.monotonic() - t0
    finally:
        if sock is not None:
            sock.close()
        stop.set()
        await watcher
    rd.rss_after_kib, rd.hwm_kib = memory(pid)
    if not rd.task_s and not rd.problems:
        rd.problems.append("the task's row was never seen terminal")
    if rd.final_state != "completed" or not rd.ended:
        rd.problems.append(f"the stream ended={rd.ended} with state {rd.final_state} (completed due)")
    if rd.chunk_texts != chunks:
        rd.problems.append(f"{rd.chunk_texts} chunk texts of {chunks}")
    return rd
