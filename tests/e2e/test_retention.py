"""Retention and expiry on a real server, both databases.

Pruning: a database filled (bulk inserts) with 3000 tasks that ended 40 days ago, with their history,
events, artifacts, webhooks, outbox rows, Idempotency-Keys and usage, beside recent ones and old ones that
have not ended; the server's retention pass prunes while clients send and stream. Afterwards exactly the
old ended tasks are gone with every row of theirs (usage rows stay), everything else is whole, no row is
left without its task, the counters equal the tasks, and ListTasks' totalSize is right.

Expiry: a task left waiting for input past INPUT_REQUIRED_TTL_S ends `canceled` with the reason, seen by a
stream open on it and by its webhook, and the run waiting for the answer is gone.

Every wait polls a condition (bounded); nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.protocol.model import TaskState, utcnow
from app.store.db import create_engine
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.fill import Spec, counters_match_tasks, fill, orphans, per_task, rows_of
from tests.support.receiver import Receiver
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess

V10 = {"A2A-Version": "1.0"}
RUNS = 'a2a_agent_runs{role="default"}'
OLD = utcnow() - timedelta(days=40)
RECENT = utcnow() - timedelta(days=29)


async def metric(client: httpx.AsyncClient, name: str) -> float:
    text = (await client.get("/metrics")).text
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


EXPIRED = "a2a_retention_expired_tasks_total"


async def until(check, timeout: float = 60, every: float = 0.1) -> Any:
    """Poll `check` (async) until it returns something truthy; fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not (got := await check()):
            await asyncio.sleep(every)
    return got


async def list_total(client: httpx.AsyncClient, **params: Any) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"page_size": 1, **params}}
    return (await client.post("/a2a/jsonrpc", json=body, headers=V10)).json()["result"]["totalSize"]


async def server_on(backend: str, tmp: Path, **env: str) -> ServerProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    srv = ServerProcess(await migrated_database_url(backend, tmp), tmp / "server.log", **env)
    return srv


class Traffic:
    """Clients sending (blocking, some with an Idempotency-Key) and streaming, until told to stop."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.stop = asyncio.Event()
        self.sent: list[str] = []
        self.keyed: dict[str, str] = {}
        self.streamed: list[str] = []

    async def sender(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            key = f"live-{n}-{i}-{uuid.uuid4().hex[:6]}" if i % 3 == 0 else None
            message = text_message(f"say:live {n} {i}", contextId=f"live-{n}")
            body = {"jsonrpc": "2.0", "id": i, "method": "message/send", "params": {"message": message}}
            headers = {"Idempotency-Key": key} if key else {}
            task = (await self.client.post("/a2a/jsonrpc", json=body, headers=headers)).json()["result"]
            assert task["status"]["state"] == "completed", task
            self.sent.append(task["id"])
            if key:
                self.keyed[key] = task["id"]

    async def streamer(self, n: int) -> None:
        while not self.stop.is_set():
            body = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "message/stream",
                "params": {"message": text_message("chunks:5", contextId=f"live-stream-{n}")},
            }
            last: dict[str, Any] = {}
            async with aconnect_sse(self.client, "POST", "/a2a/jsonrpc", json=body) as src:
                async for sse in src.aiter_sse():
                    last = json.loads(sse.data)["result"]
                    if last["kind"] == "task":
                        task_id = last["id"]
            assert last["kind"] == "status-update" and last["status"]["state"] == "completed", last
            self.streamed.append(task_id)

    async def run(self) -> None:
        await asyncio.gather(*(self.sender(n) for n in range(3)), *(self.streamer(n) for n in range(2)))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_prune_removes_exactly_the_old_ended_tasks_while_traffic_goes_on(backend, tmp_path):
    srv = await server_on(
        backend,
        tmp_path,
        TASK_RETENTION_DAYS="30",
        RETENTION_INTERVAL_S="1",
        RETENTION_BATCH="200",
        INPUT_REQUIRED_TTL_S="0",
        PUSH_DELIVER="false",
    )
    engine = create_engine(srv.database_url)
    try:
        old = Spec(at=OLD, contexts=40, tag="a")
        old_failed = Spec(at=OLD, state=TaskState.FAILED, tag="f", outbox=0)
        old_bob = Spec(owner="bob", at=OLD, state=TaskState.CANCELED, contexts=7, tag="b", push=False)
        pruned = [
            *await fill(engine, 2000, old),
            *await fill(engine, 500, old_failed),
            *await fill(engine, 500, old_bob),
        ]
        kept_specs = {
            "recent": Spec(at=RECENT, contexts=40, tag="a"),
            "waiting": Spec(at=OLD, state=TaskState.INPUT_REQUIRED, tag="w"),
            "working": Spec(
                owner="bob",
                at=OLD,
                state=TaskState.WORKING,
                tag="r",
                lease_owner="replica-elsewhere",
                lease_expires_at=utcnow() + timedelta(hours=2),
            ),
        }
        kept = {name: await fill(engine, 40, spec) for name, spec in kept_specs.items()}
        gone = per_task(old, 2000) + per_task(old_failed, 500) + per_task(old_bob, 500)

        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as client:
            traffic = Traffic(client)
            running = asyncio.create_task(traffic.run())
            try:
                # Until the first pass has finished, with clients sending all along; then what it deleted.
                (pruned_tasks,) = await until(
                    lambda: _first_pass(client, len(traffic.sent) + len(traffic.streamed)), timeout=120
                )
                assert pruned_tasks == 3000, (
                    f"the first retention pass deleted {pruned_tasks:g} tasks; 3000 were old and ended"
                )
                sent_before = len(traffic.sent)
                await until(lambda: _async(len(traffic.sent) > sent_before + 3))
            finally:
                traffic.stop.set()
                await asyncio.wait_for(running, 60)

            assert traffic.sent and traffic.streamed
            by_table = {
                m.group(1): int(float(m.group(2)))
                for m in re.finditer(
                    r'^a2a_retention_pruned_rows_total\{table="(\w+)"\} (\S+)$',
                    (await client.get("/metrics")).text,
                    re.M,
                )
            }
            assert {t: by_table.get(t, 0) for t in gone if t != "task_usage"} == {
                t: n for t, n in gone.items() if t != "task_usage"
            }

            # The old ended tasks are gone with every row of theirs; their usage is kept.
            assert +(await rows_of(engine, pruned)) == Counter({"task_usage": 3000})
            # The others are whole.
            for name, ids in kept.items():
                assert await rows_of(engine, ids) == per_task(kept_specs[name], 40), name
            live = traffic.sent + traffic.streamed
            assert (await rows_of(engine, live))["tasks"] == len(live)
            assert await orphans(engine) == Counter()
            await counters_match_tasks(engine)

            # ListTasks counts what is there: the anonymous caller's kept and live tasks.
            mine = 40 + 40 + len(live)
            assert await list_total(client) == mine
            assert await list_total(client, context_id="a-ctx-3") == 1
            streams = [await list_total(client, context_id=f"live-stream-{n}") for n in range(2)]
            assert sum(streams) == len(traffic.streamed)
            # Idempotency-Keys of the live traffic still answer with their task.
            key, task_id = next(iter(traffic.keyed.items()))
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {"message": text_message("say:again")},
            }
            again = (await client.post("/a2a/jsonrpc", json=body, headers={"Idempotency-Key": key})).json()
            assert "error" in again or again["result"]["id"] == task_id
    finally:
        srv.stop()
        await engine.dispose()


async def _async(value: Any) -> Any:
    return value


async def _first_pass(client: httpx.AsyncClient, traffic: int) -> tuple[float] | None:
    """Once a retention pass has finished and traffic is flowing: the tasks it deleted (in a tuple, so that
    none deleted still counts as an answer)."""
    if traffic == 0 or await metric(client, "a2a_retention_last_pass_timestamp_seconds") == 0:
        return None
    return (await metric(client, "a2a_retention_pruned_tasks_total"),)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_task_waiting_too_long_ends_canceled_for_its_stream_and_webhook(backend, tmp_path):
    receiver = Receiver()
    srv = await server_on(
        backend,
        tmp_path,
        # Every step waits on a state but the read of the waiting run's gauge, judged only while the task
        # is still seen waiting after it (on a machine too busy to read it within the TTL, it is skipped).
        INPUT_REQUIRED_TTL_S="10",
        RETENTION_INTERVAL_S="0.5",
        PUSH_NOTIFICATION_ALLOW_HTTP="true",
        PUSH_NOTIFICATION_ALLOWED_HOSTS="127.0.0.1",
        PUSH_POLL_S="0.05",
    )
    srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as client:
            hook = {"url": receiver.url("/expiry"), "token": "t"}
            task = await result(
                client,
                "message/send",
                {"message": text_message("ask:Proceed?"), "configuration": {"pushNotificationConfig": hook}},
            )
            assert task["status"]["state"] == "input-required"
            waiting_runs = await metric(client, RUNS)
            still = await result(client, "tasks/get", {"id": task["id"]})
            if still["status"]["state"] == "input-required":
                assert waiting_runs == 1, "its run waits for the answer"
            body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/resubscribe", "params": {"id": task["id"]}}
            seen: list[dict[str, Any]] = []
            async with asyncio.timeout(60):
                async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
                    async for sse in src.aiter_sse():
                        if sse.data:  # (a keep-alive comment comes as an event without data)
                            seen.append(json.loads(sse.data))
            assert all("result" in e for e in seen), seen
            last = seen[-1]["result"]
            # The canceled status event (or, had the stream opened only after it, the task as it ended).
            assert last["kind"] == "task" or last["final"] is True
            assert last["status"]["state"] == "canceled"
            reason = last["status"]["message"]["parts"][0]["text"]
            assert "INPUT_REQUIRED_TTL_S" in reason and "10 s" in reason

            def canceled_delivered() -> bool:
                return any(
                    c.body.get("status", {}).get("state") == "canceled"
                    and c.body.get("status", {}).get("message", {}).get("parts", [{}])[0].get("text")
                    == reason
                    for c in receiver.at("/expiry")
                )

            await receiver.wait_for(canceled_delivered, timeout=60)
            got = await result(client, "tasks/get", {"id": task["id"]})
            assert got["status"]["state"] == "canceled"
            await until(lambda: _gauge_is(client, RUNS, 0))
            # The pass counts the task once its cancel has returned (the run stopped, its children looked up),
            # a moment after the stream and the webhook saw the cancel: run 5 of #33 read it in between.
            with contextlib.suppress(TimeoutError):
                await until(lambda: _gauge_is(client, EXPIRED, 1), timeout=30)
            assert await metric(client, EXPIRED) == 1, "the pass that canceled the task counted it once"
            # An answer now finds a finished task.
            answer = text_message("yes", taskId=task["id"])
            late = await client.post(
                "/a2a/jsonrpc",
                json={"jsonrpc": "2.0", "id": 9, "method": "message/send", "params": {"message": answer}},
            )
            assert "error" in late.json()
    finally:
        srv.stop()
        receiver.close()


async def _gauge_is(client: httpx.AsyncClient, name: str, value: float) -> bool:
    return await metric(client, name) == value
