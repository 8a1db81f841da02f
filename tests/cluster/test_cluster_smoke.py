"""Scale-out smoke: three replicas behind nginx on one PostgreSQL (and Redis), all as real processes.

nginx serves the card and JSON-RPC from any replica, streams SSE through unbuffered with the resume
cursor passed on, skips a killed replica without failing a call, and the cluster survives a Redis restart.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import urllib.parse

import httpx
from httpx_sse import aconnect_sse

from tests.support.cluster import Cluster
from tests.support.rpc import send, text_message


async def stream(
    client: httpx.AsyncClient, method: str, params: dict, headers: dict | None = None, until=None
) -> list[tuple[int, dict]]:
    """Read an SSE stream until `until(event)` holds or the stream ends; [(id, result)]."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    out: list[tuple[int, dict]] = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body, headers=headers or {}) as src:
        assert src.response.headers["content-type"].startswith("text/event-stream")
        async for sse in src.aiter_sse():
            event = json.loads(sse.data)["result"]
            out.append((int(sse.id), event))
            if until is not None and until(event):
                break
    return out


def input_required(event: dict) -> bool:
    return event.get("kind") == "status-update" and event["status"]["state"] == "input-required"


def redis_run_id(redis_url: str) -> str:
    """The run_id of the Redis server (new on every start), via a raw inline INFO command."""
    url = urllib.parse.urlsplit(redis_url)
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), timeout=5) as s:
        s.sendall(b"INFO server\r\n")
        data = b""
        while b"run_id:" not in data or not data.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode().splitlines():
        if line.startswith("run_id:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no run_id in INFO reply: {data[:200]!r}")


async def test_card_and_send_through_nginx(cluster: Cluster):
    assert len(cluster.replicas) == 3
    assert len({r.replica_id for r in cluster.replicas}) == 3
    async with httpx.AsyncClient(base_url=cluster.nginx_url, timeout=30) as client:
        resp = await client.get("/.well-known/agent-card.json")
        assert resp.status_code == 200
        assert resp.headers["server"].startswith("nginx")
        card = resp.json()
        assert card["url"] == f"{cluster.nginx_url}/a2a/jsonrpc"
        assert (await client.get("/readyz")).status_code == 200

        for url in cluster.urls:
            own = await client.get(url + "/.well-known/agent-card.json")
            assert own.status_code == 200
            assert "server" not in own.headers or not own.headers["server"].startswith("nginx")
            assert own.json() == card
            assert own.headers["etag"] == resp.headers["etag"]

        task = await send(client, "say:hello through nginx")
        assert task["status"]["state"] == "completed"
        assert "hello through nginx" in json.dumps(task["artifacts"])


async def test_stream_and_resume_cursor_through_nginx(cluster: Cluster):
    async with httpx.AsyncClient(base_url=cluster.nginx_url, timeout=30) as client:
        # The events arrive while the response is still going; the send's stream ends at the question.
        live = await stream(
            client,
            "message/stream",
            {"message": text_message("tool:Read;say:first;ask:Go on?")},
            until=input_required,
        )
        ids = [i for i, _ in live]
        assert ids == list(range(1, len(ids) + 1))
        task_id = live[0][1]["id"]

        # Last-Event-ID must reach the replica: exactly the events after 1 are replayed from the database.
        resumed = await stream(
            client,
            "tasks/resubscribe",
            {"id": task_id},
            headers={"Last-Event-ID": "1"},
            until=input_required,
        )
        # The same events; only the question differs: it ends the send's stream (`final`), while the
        # subscriber follows the task on through it.
        assert resumed[:-1] == live[1:-1]
        assert live[-1][1]["final"] is True and resumed[-1][1]["final"] is False
        assert {**resumed[-1][1], "final": True} == live[-1][1] and resumed[-1][0] == live[-1][0]


async def test_killed_replica_is_skipped_and_comes_back(cluster: Cluster):
    old_pid = cluster.replicas[0].pid
    cluster.kill(0)
    assert not cluster.replicas[0].alive()
    async with httpx.AsyncClient(base_url=cluster.nginx_url, timeout=30) as client:
        for _ in range(6):
            assert (await client.get("/.well-known/agent-card.json")).status_code == 200
        tasks = await asyncio.gather(*(send(client, f"say:after kill {n}") for n in range(6)))
        assert all(t["status"]["state"] == "completed" for t in tasks)

        cluster.terminate(1)
        proc = cluster.replicas[1].proc
        # uvicorn re-raises the SIGTERM it handled once shut down: -15 is its graceful exit (not SIGKILL).
        assert proc is not None and proc.returncode in (0, -signal.SIGTERM)
        task = await send(client, "say:one replica left")
        assert task["status"]["state"] == "completed"

        await asyncio.to_thread(cluster.restart, 0)
        await asyncio.to_thread(cluster.restart, 1)
        assert cluster.replicas[0].pid != old_pid
        assert all(r.alive() for r in cluster.replicas)
        for url in cluster.urls:
            assert (await client.get(url + "/readyz")).status_code == 200
        task = await send(client, "say:all back")
        assert task["status"]["state"] == "completed"


async def test_cluster_survives_a_redis_restart(cluster: Cluster):
    before = redis_run_id(cluster.redis_url)
    await asyncio.to_thread(cluster.restart_redis)
    assert redis_run_id(cluster.redis_url) != before, "redis.sh restart must start a new process"
    async with httpx.AsyncClient(base_url=cluster.nginx_url, timeout=30) as client:
        task = await send(client, "say:after redis restart")
        assert task["status"]["state"] == "completed"
