"""A database outage longer than DB_OUTAGE_GRACE_S: no task stays `working`.

On a PostgreSQL and a Redis of this test alone (the shared ones are never stopped). The outage lasts until
the surviving replica has logged that its run gave up (the grace counts from its first failed commit,
which a busy machine may make late), never a guessed time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from scripts.ready import log_tail
from tests.cluster.test_chaos_load import Client, event_log, reason, rpc, streaming_script
from tests.conftest import _fresh_pg_database
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.rpc import text_message

GRACE_S = 2.0
WAIT_S = 60.0
"""A guard against a hang, never a timing assertion: every wait ends on its condition."""
GAVE_UP = "the database was unreachable for more than"
"""What a replica logs when a run gives up on the database (app/runner/runner.py)."""


async def until_logged(cl: Cluster, i: int, text: str) -> None:
    """Once replica `i`'s log has a line with `text`; failing with its log tail."""
    try:
        async with asyncio.timeout(WAIT_S):
            while text not in cl.log(i):
                await asyncio.sleep(0.1)
    except TimeoutError:
        r = cl.replicas[i]
        raise AssertionError(f"{r.replica_id} never logged {text!r}:\n{log_tail(r.log_path, 40)}") from None


async def test_past_the_grace_a_run_ends_failed_by_its_replica_or_by_the_reaper(
    own_services: OwnServices, tmp_path: Path
):
    db = await _fresh_pg_database(own_services.pg_url)
    cl = Cluster(
        db,
        own_services.redis_url,
        tmp_path / "cluster",
        2,
        LEASE_TTL_S="8",  # the killed replica's task is reaped soon; a live one renews in time when back
        QUEUE_POLL_S="0.5",
        DB_OUTAGE_GRACE_S=str(GRACE_S),
    )
    await asyncio.to_thread(cl.start)
    try:
        # Runs far longer than the test: each is ended by the outage, never by its own end.
        send = {"message": text_message(streaming_script(300)), "configuration": {"blocking": False}}
        # The replica that receives a task runs it: one task on each.
        survivor = await rpc(cl.urls[0], "message/send", send)
        doomed = await rpc(
            cl.urls[1], "message/send", {**send, "message": text_message(streaming_script(300))}
        )
        clients = [Client(survivor["id"]), Client(doomed["id"])]
        following = [asyncio.create_task(c.follow(cl.urls[0])) for c in clients]
        async with asyncio.timeout(WAIT_S):
            for c in clients:
                while len(c.events) < 3:
                    await c.streaming.wait()
                    c.streaming.clear()
        await asyncio.to_thread(own_services.stop_pg)
        # Through nginx a read answers the replicas' 503 with Retry-After, every time: nginx once counted
        # each 503 as a failure, took every replica out for 2 s and answered 502 meanwhile (`make soak`).
        async with httpx.AsyncClient(base_url=cl.nginx_url, timeout=30) as c:
            answers = [await c.get("/a2a/rest/tasks") for _ in range(10)]
        assert [(r.status_code, "retry-after" in r.headers) for r in answers] == [(503, True)] * 10, [
            (r.status_code, r.text[:80]) for r in answers
        ]
        await until_logged(cl, 0, f"task {survivor['id']}: {GAVE_UP}")
        await asyncio.to_thread(cl.kill, 1)  # its task is now nobody's: a reaper's, once the database is back
        await asyncio.to_thread(own_services.start_pg)
        async with asyncio.timeout(2 * WAIT_S):
            await asyncio.gather(*following)

        own = await rpc(cl.urls[0], "tasks/get", {"id": survivor["id"]})
        assert own["status"]["state"] == "failed"
        assert "database was unreachable" in reason(own), reason(own)
        lost = await rpc(cl.urls[0], "tasks/get", {"id": doomed["id"]})
        assert lost["status"]["state"] == "failed"
        assert "a2a-2" in reason(lost) and "lease" in reason(lost), reason(lost)

        dsn = db.replace("postgresql+asyncpg://", "postgresql://")
        for c in clients:
            log = await event_log(dsn, c.task_id)
            assert log == list(range(1, len(log) + 1))
            snapshot, seen = c.seqs_after_snapshot()
            assert seen == [s for s in log if s > snapshot]
    finally:
        await asyncio.to_thread(cl.stop)
