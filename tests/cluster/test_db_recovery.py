"""Once PostgreSQL is back after a restart, no client call fails on a pooled connection the restart closed.

On a PostgreSQL of this test alone (the shared one is never stopped). The replica's pool is filled with
connections first; the restart closes every one of them server-side. When the database answers again,
a burst of reads and sends must all succeed: a call that draws a dead pooled connection is retried on a
fresh one instead of answering 503. While it is away, sends are refused at once and leave nothing behind.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import httpx

from tests.conftest import _fresh_pg_database
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.rpc import text_message

BURST = 40


async def _call(client: httpx.AsyncClient, url: str, method: str, params: dict) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return await client.post(f"{url}/a2a/jsonrpc", json=body)


async def _until_postgres_answers(dsn: str) -> None:
    async with asyncio.timeout(60):
        while True:
            try:
                conn = await asyncpg.connect(dsn)
            except (OSError, asyncpg.PostgresError):
                await asyncio.sleep(0.2)
                continue
            await conn.close()
            return


async def test_calls_after_a_postgres_restart_never_meet_a_dead_pooled_connection(
    own_services: OwnServices, tmp_path: Path
):
    db = await _fresh_pg_database(own_services.pg_url)
    # The echo agent is pure: its blocking sends commit each task with its run's first step (staged
    # creation), the path a send during the outage takes. Two slots: a run leaked by a failed send shows.
    cl = Cluster(
        db,
        own_services.redis_url,
        tmp_path / "cluster",
        1,
        redis_bus=False,
        AGENT_ADAPTER="echo",
        MAX_CONCURRENT_TASKS="2",
    )
    await asyncio.to_thread(cl.start)
    url = cl.urls[0]
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            first = await _call(client, url, "message/send", {"message": text_message("before")})
            task_id = first.json()["result"]["id"]
            # Concurrent reads hold many pooled connections at once: the pool keeps them all.
            warm = await asyncio.gather(
                *(_call(client, url, "tasks/get", {"id": task_id}) for _ in range(BURST))
            )
            assert all("result" in r.json() for r in warm)

            await asyncio.to_thread(own_services.stop_pg)
            # While it is away, a send is refused at once with the outage's 503, and stores nothing.
            down = await asyncio.gather(
                *(
                    _call(client, url, "message/send", {"message": text_message(f"down {i}")})
                    for i in range(4)
                )
            )
            assert [(r.status_code, r.json()["error"]["code"]) for r in down] == [(503, -32603)] * 4
            await asyncio.to_thread(own_services.start_pg)
            await _until_postgres_answers(db.replace("postgresql+asyncpg://", "postgresql://"))

            gets = [_call(client, url, "tasks/get", {"id": task_id}) for _ in range(BURST)]
            sends = [
                _call(client, url, "message/send", {"message": text_message(f"after {i}")})
                for i in range(BURST // 4)
            ]
            answers = await asyncio.gather(*gets, *sends)
            failed = [(r.status_code, r.json().get("error")) for r in answers if "error" in r.json()]
            assert failed == [], failed
            assert all(r.status_code == 200 for r in answers)
            states = {r.json()["result"]["status"]["state"] for r in answers[BURST:]}
            assert states == {"completed"}, states
            body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
            listed = await client.post(f"{url}/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
            stored = listed.json()["result"]["tasks"]
            assert len(stored) == 1 + len(sends), "the sends refused in the outage stored nothing"
    finally:
        await asyncio.to_thread(cl.stop)
