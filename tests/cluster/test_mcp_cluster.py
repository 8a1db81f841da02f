"""`/mcp` keeps no session: behind nginx, and on each replica directly, one host's calls about one task are
answered by whichever replica gets them. A task asks through one replica, is read on every one, answered
through another; a task started on one replica is canceled through another."""

from __future__ import annotations

from tests.support.cluster import Cluster
from tests.support.mcp import answer, mcp_client


async def test_any_replica_serves_any_call(cluster: Cluster):
    async with mcp_client(cluster.nginx_url) as client:
        role = answer(await client.call_tool("list_agents", {}))["agents"][0]["role"]
        asked = answer(await client.call_tool("run_task", {"role": role, "message": "ask:Ship it?"}))
    assert asked["state"] == "input-required" and "Ship it?" in asked["text"], asked
    for url in cluster.urls:
        async with mcp_client(url) as client:
            seen = answer(await client.call_tool("get_task", {"task_id": asked["taskId"]}))
        assert seen == asked, url
    async with mcp_client(cluster.urls[-1]) as client:
        done = answer(await client.call_tool("answer_task", {"task_id": asked["taskId"], "message": "y"}))
    assert done["state"] == "completed" and "answer:y" in done["text"], done

    async with mcp_client(cluster.urls[0]) as client:
        started = answer(
            await client.call_tool("run_task", {"role": role, "message": "sleep:60", "wait": False})
        )
    async with mcp_client(cluster.urls[1]) as client:
        canceled = answer(await client.call_tool("cancel_task", {"task_id": started["taskId"]}))
    assert canceled["state"] == "canceled"
    async with mcp_client(cluster.nginx_url) as client:
        listed = answer(await client.call_tool("list_tasks", {"limit": 10}))
    assert {asked["taskId"], started["taskId"]} <= {t["taskId"] for t in listed["tasks"]}
