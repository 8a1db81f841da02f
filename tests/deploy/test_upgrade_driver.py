"""scripts/upgrade_check.py's client: a send cut before any answer (nginx retiring a kept-alive connection on
a reload) is sent once more with the same Idempotency-Key, and the report notes it; any other call, cut, is
the check's failure."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from scripts.upgrade_check import Driver, Release, Report


class _CutsFirst:
    """A loopback HTTP server that closes the first connection unanswered and answers the rest."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        await reader.readexactly(int(fields.get("content-length", "0")))
        self.keys.append(fields.get("idempotency-key"))
        if len(self.keys) == 1:
            writer.close()
            return
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"kind": "task", "id": "t"}}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def test_a_send_cut_before_its_answer_is_sent_again_with_its_key() -> None:
    report = Report(Release(commit="0" * 40, name="test"))
    driver = Driver(report)
    server = _CutsFirst()
    try:
        async with server as base:
            task = await driver.rpc(base, "message/send", {"message": {}})
    finally:
        await driver.client.aclose()
    assert task == {"kind": "task", "id": "t"}
    assert len(server.keys) == 2 and server.keys[0] is not None and server.keys[0] == server.keys[1]
    assert len(report.notes) == 1 and "cut before an answer" in report.notes[0]


async def test_any_other_call_cut_is_the_checks_failure() -> None:
    driver = Driver(Report(Release(commit="0" * 40, name="test")))
    server = _CutsFirst()
    try:
        async with server as base:
            with pytest.raises(httpx.TransportError):
                await driver.rpc(base, "tasks/get", {"id": "t"})
    finally:
        await driver.client.aclose()
    assert server.keys == [None]
