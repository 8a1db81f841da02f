"""The deliverer draining a backlog on a real database (both backends), in process: every notification
arrives, each webhook's in order, never more calls at once than `max_in_flight`, a backlog larger than
that is taken up without waiting for the poll, and every claim ends given up with its tally.

The receiver is a small keep-alive HTTP/1.1 server on loopback in the test's own loop that counts the
calls open at once (each answered after a short pause, so that calls overlap)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import orjson
import pytest
from sqlalchemy import text, update

from app import ssrf
from app.push.deliverer import Deliverer, Options
from app.store.db import create_engine
from app.store.models import PushConfigRow
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.fill import Spec, fill

DEADLINE_S = 30.0
"""Longest wait for a drain; the poll is set far above it, so only the backlog refill can meet it."""


class CountingReceiver:
    """Records each POST's path and body and the most calls it had open at once."""

    def __init__(self, pause_s: float = 0.005) -> None:
        self.pause_s = pause_s
        self.calls: dict[str, list[Any]] = defaultdict(list)
        self.open = 0
        self.most_open = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def total(self) -> int:
        return sum(len(v) for v in self.calls.values())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.open += 1
                self.most_open = max(self.most_open, self.open)
                try:
                    await asyncio.sleep(self.pause_s)
                    self.calls[path].append(orjson.loads(body))
                finally:
                    self.open -= 1
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def wait_for(condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_backlog_drains_in_order_within_the_call_limit(backend, tmp_path):
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    receiver = CountingReceiver()
    base = await receiver.start()
    hooks, per_hook, in_flight = 40, 3, 4
    deliverer = None
    try:
        ids = await fill(engine, hooks, Spec(events=4, outbox=per_hook, idem=False, usage=False))
        async with engine.begin() as conn:
            for i, task_id in enumerate(ids):
                await conn.execute(
                    update(PushConfigRow).where(PushConfigRow.task_id == task_id).values(url=f"{base}/h{i}")
                )
        options = Options(
            policy=ssrf.Policy(allow_http=True, allowed_hosts=frozenset({"127.0.0.1"})),
            max_in_flight=in_flight,
            poll_s=600.0,
        )
        deliverer = Deliverer(engine, "replica-a", options)
        deliverer.start()

        async def drained() -> bool:
            async with engine.connect() as conn:
                left = (await conn.execute(text("SELECT count(*) FROM push_outbox"))).scalar_one()
                held = (
                    await conn.execute(text("SELECT count(*) FROM push_configs WHERE claimed_by IS NOT NULL"))
                ).scalar_one()
            return left == 0 and held == 0 and not deliverer.stats()["inFlight"]

        # Far more webhooks than call slots, and no doorbell: only the backlog refill takes the rest up
        # before the (10 minute) poll.
        await wait_for(drained, "the backlog to drain")
        assert receiver.total() == hooks * per_hook
        assert receiver.most_open <= in_flight
        for i in range(hooks):
            got = receiver.calls[f"/h{i}"]
            # v1.0 bodies of events 1..per_hook, in order (the first is the submitted status).
            assert len(got) == per_hook
            assert "statusUpdate" in got[0]
            assert all("artifactUpdate" in body for body in got[1:])
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text("SELECT attempts, delivered, failed, claim_expires_at FROM push_configs")
                )
            ).all()
        assert len(rows) == hooks
        assert all(tuple(r) == (per_hook, per_hook, 0, None) for r in rows)
        assert deliverer.stats()["delivered"] == hooks * per_hook
    finally:
        if deliverer is not None:
            await deliverer.stop()
        await receiver.stop()
        await engine.dispose()


async def test_deliverer_engine_commits_asynchronously(tmp_path):
    """The deliverer's own PostgreSQL pool sets it once per session (not per transaction)."""
    url = await migrated_database_url("postgres", tmp_path)
    own = create_engine(url, pool_size=2, synchronous_commit=False)
    try:
        async with own.connect() as conn:
            assert (await conn.execute(text("SHOW synchronous_commit"))).scalar_one() == "off"
    finally:
        await own.dispose()
