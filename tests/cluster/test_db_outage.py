"""A database outage longer than DB_OUTAGE_GRACE_S: no task stays `working`.

On a PostgreSQL and a Redis of this test alone (the shared ones are never stopped). The outage's length is
the fault itself (a sleep longer than the grace), never an assertion.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.cluster.test_chaos_load import Client, event_log, reason, rpc, streaming_script
from tests.conftest import _fresh_pg_database
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.rpc import text_message

GRACE_S = 2.0


async def test_past_the_grace_a_run_ends_failed_by_its_replica_or_by_the_reaper(
    own_services: OwnServices, tmp_path: Path
):
    db = await _fresh_pg_database(own_services.pg_url)
    cl = Cluster(
        db,
        own_services.redis_url,
        tmp_path / "cluster",
        2,
        LEASE_TTL_S="3",
        QUEUE_POLL_S="0.5",
        DB_OUTAGE_GRACE_S=str(GRACE_S),
    )
    await asyncio.to_thread(cl.start)
    try:
        send = {"message": text_message(streaming_script(30)), "configuration": {"blocking": False}}
        # The replica that receives a task runs it: one task on each.
        survivor = await rpc(cl.urls[0], "message/send", send)
        doomed = await rpc(
            cl.urls[1], "message/send", {**send, "message": text_message(streaming_script(30))}
        )
        clients = [Client(survivor["id"]), Client(doomed["id"])]
        following = [asyncio.create_task(c.follow(cl.urls[0])) for c in clients]
        async with asyncio.timeout(30):
            for c in clients:
                while len(c.events) < 3:
                    await c.streaming.wait()
                    c.streaming.clear()
        await asyncio.to_thread(own_services.stop_pg)
        await asyncio.sleep(GRACE_S + 3)
        await asyncio.to_thread(cl.kill, 1)  # its run is past the grace too, and now nobody's
        await asyncio.to_thread(own_services.start_pg)
        async with asyncio.timeout(60):
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
