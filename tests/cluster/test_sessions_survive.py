"""A coding session that outlives its machine, with the real Claude Code CLI (pinned, against the fake
Anthropic API) in its jail: two replicas behind nginx (PostgreSQL, Redis), each with a workspace root of its
own as two machines would have, run the role `default`; the role `coder` runs only on remote workers, each
with its own workspace root too. Leases are short and checkpoints frequent, so a holder's death is noticed
and a checkpoint taken within seconds; every wait is for a state (a file in a workspace, a checkpoint row,
a process gone, an event), never for a time.

- A worker killed (`kill -9`) mid-task after a checkpoint: a second worker restores the workspace and the
  session and completes the task; the resumed CLI carries the first run's conversation (the fake API's
  request), a stream held through nginx sees every event once and in order, both holders named, and the
  console's task page (Chromium) lists the attempt.
- A replica killed mid-task: the other replica goes on with it the same way.
- A task waiting for an approval on a worker that is killed: the answer, sent through nginx, is taken by
  another worker, which restores the session first.
- A replica stopped with SIGTERM while it runs three CLI tasks: each is drained and completes on the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from playwright.async_api import expect
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import hash_key
from app.store.models import TaskRow
from scripts.cluster import Replica
from tests.conftest import migrated_pg_database
from tests.support.auth import api_keys_env, key_of
from tests.support.browser import launch, sign_in
from tests.support.checkpoints import holds
from tests.support.clis import CLI_BIN, install_clis
from tests.support.cluster import Cluster
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.secrets import remember
from tests.support.worker import WorkerProcess, until_listed

WORKER_KEY = "coder-" + os.urandom(8).hex()
remember(WORKER_KEY)
CLAUDE = {"adapter": "claude-code"}
AGENTS = {"default": CLAUDE, "coder": {**CLAUDE, "card": {"name": "Coder"}}}
CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
WAIT_S = 150
ENDED = {"completed", "failed", "canceled", "rejected"}
BUSY = "RUN: echo first > a.txt && sleep 600"
"""The CLI writes a file, then stays in its Bash call: a checkpoint is taken while it waits."""


class Machines(Cluster):
    """Replicas that are machines of their own: each its own AGENT_WORKSPACE_ROOT (and so its own HOMEs)."""

    def replica_env(self, replica: Replica) -> dict[str, str]:
        env = super().replica_env(replica)
        env["AGENT_WORKSPACE_ROOT"] = str(self.workdir / "machines" / replica.replica_id)
        return env


@dataclass
class Team:
    cluster: Machines
    fake: FakeAnthropic
    root: Path
    database_url: str
    workers: dict[str, WorkerProcess] = field(default_factory=dict)

    def worker(self, instance: str, **env: str) -> WorkerProcess:
        """A worker of the role `coder`, a machine of its own, started (`until_listed`: once it serves)."""
        w = WorkerProcess(
            self.cluster.nginx_url,
            self.root / f"{instance}.log",
            instance,
            key=WORKER_KEY,
            agents={"coder": AGENTS["coder"]},
            role="coder",
            slots=2,
            env={**claude_env(self.fake), "AGENT_WORKSPACE_ROOT": str(self.machine(instance)), **env},
        )
        w.start()
        self.workers[instance] = w
        return w

    def machine(self, name: str) -> Path:
        """A machine's workspace root: a worker's instance, or a replica's id."""
        return (
            self.root / "machines" / name
            if name.startswith("w")
            else self.cluster.workdir / "machines" / name
        )

    def workspace(self, name: str, context_id: str) -> Path:
        return self.machine(name) / principal_key("alice") / context_id

    def logs(self) -> str:
        parts = [f"--- {n}:\n{w.log()[-3000:]}" for n, w in self.workers.items()]
        parts += [
            f"--- replica {i}:\n{self.cluster.log(i)[-3000:]}" for i in range(len(self.cluster.replicas))
        ]
        return "\n".join(parts)


def claude_env(fake: FakeAnthropic) -> dict[str, str]:
    return {
        "CLAUDE_BIN": str(CLI_BIN / "claude"),
        **CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": fake.url,
        "AGENT_ENV_PASSTHROUGH": ",".join([*CLAUDE_ENV, "ANTHROPIC_BASE_URL"]),
        "AGENT_EGRESS_ALLOW": fake.url.removeprefix("http://"),
        "CHECKPOINT_S": "1",
        "CANCEL_GRACE_S": "2",
    }


@pytest.fixture(scope="module")
async def team(tmp_path_factory: Any) -> AsyncIterator[Team]:
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both")
    install_clis()
    fake = FakeAnthropic().start()
    root = tmp_path_factory.mktemp("sessions")
    db = await migrated_pg_database(pg)
    env = api_keys_env(
        AGENTS=json.dumps(AGENTS),
        AGENT_ROLES="default",
        WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "box"}),
        # Long enough that a busy machine does not void a live holder's lease (two TTLs with no renewal),
        # short enough that a killed one's is void within seconds: every wait is for that state, not a time.
        LEASE_TTL_S="5",
        QUEUE_POLL_S="0.5",
        DISCOVERY_HEARTBEAT_S="1",
        DISCOVERY_MAX_AGE_S="10",
        # A handed-on task waits for the next worker, however slowly it starts on a busy machine.
        ROLE_WAIT_S="300",
        **claude_env(fake),
    )
    cluster = Machines(db, redis, root / "cluster", 2, migrated=True, **env)
    await asyncio.to_thread(cluster.start)
    t = Team(cluster, fake, root, db)
    try:
        yield t
    finally:
        for w in t.workers.values():
            w.stop()
        await asyncio.to_thread(cluster.stop)
        fake.stop()


@pytest.fixture(autouse=True)
async def workers_stopped(team: Team) -> AsyncIterator[None]:
    """Each test's workers stopped when it ends, passed or not: none takes the next test's tasks."""
    yield
    for name in list(team.workers):
        await asyncio.to_thread(team.workers.pop(name).stop)


async def rpc(base: str, path: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=60, headers=key_of("alice")) as c:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        data = (await c.post(f"{path}/a2a/jsonrpc", json=body)).json()
    assert "result" in data, data
    return dict(data["result"])


async def start(base: str, path: str, msg: dict[str, Any]) -> dict[str, Any]:
    """A non-blocking `message/send`: the task as it was stored."""
    return await rpc(base, path, "message/send", {"message": msg, "configuration": {"blocking": False}})


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


async def get(base: str, path: str, task_id: str) -> dict[str, Any]:
    return await rpc(base, path, "tasks/get", {"id": task_id})


async def until(base: str, path: str, task_id: str, done: Any, team: Team) -> dict[str, Any]:
    try:
        async with asyncio.timeout(WAIT_S):
            while not done(task := await get(base, path, task_id)):
                await asyncio.sleep(0.2)
    except TimeoutError:
        last = await get(base, path, task_id)
        pytest.fail(f"task {task_id} never got there: {last['status']}\n{team.logs()}")
    return task


async def checkpoint_after(team: Team, task_id: str, *files: str) -> None:
    """Wait until the task's stored checkpoint holds the CLI's session and each of `files` of its workspace
    (the work it must keep): the archive itself, not a time (`tests/support/checkpoints.py`)."""
    engine = create_async_engine(team.database_url)
    try:
        async with asyncio.timeout(WAIT_S):
            while not await holds(engine, task_id, *files, session=True):
                await asyncio.sleep(0.2)
    except TimeoutError:
        async with engine.connect() as conn:
            query = select(TaskRow.state, TaskRow.status, TaskRow.lease_owner).where(TaskRow.id == task_id)
            stored = (await conn.execute(query)).first()
        pytest.fail(f"no checkpoint of task {task_id} holds {files}; stored: {stored}\n{team.logs()}")
    finally:
        await engine.dispose()


async def stream(base: str, path: str, text: str, into: list[tuple[int, dict[str, Any]]]) -> None:
    """`message/stream` through nginx; each event with its SSE id, until the stream ends."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message(text)}}
    async with httpx.AsyncClient(
        base_url=base, timeout=httpx.Timeout(60, read=None), headers=key_of("alice")
    ) as c:
        async with aconnect_sse(c, "POST", f"{path}/a2a/jsonrpc", json=body) as source:
            async for sse in source.aiter_sse():
                if sse.data:
                    into.append((int(sse.id), json.loads(sse.data)["result"]))


def texts_of(task: dict[str, Any]) -> list[str]:
    return [p.get("text", "") for m in task.get("history", []) for p in m["parts"]]


def resumed_requests(fake: FakeAnthropic, first: str) -> list[list[str]]:
    """The fake API's requests that carried the resume note after the first run's prompt: the resumed CLI's,
    which could only know the first prompt from the restored session."""
    return [
        p for p in fake.prompts() if any(first in x for x in p) and any("was interrupted" in x for x in p)
    ]


async def test_a_worker_killed_mid_task_hands_its_session_to_another_worker(team: Team) -> None:
    base = team.cluster.nginx_url
    w1 = team.worker("w1")
    await until_listed(base, "coder", True, headers=key_of("alice"))
    events: list[tuple[int, dict[str, Any]]] = []
    reader = asyncio.create_task(stream(base, "/agents/coder", BUSY, events))
    try:
        async with asyncio.timeout(WAIT_S):
            while not events:
                await asyncio.sleep(0.1)
        task_id, context = events[0][1]["id"], events[0][1]["contextId"]
        await checkpoint_after(team, task_id, "a.txt")
        w1.kill()
        team.worker("w2")
        await asyncio.wait_for(reader, WAIT_S)
    finally:
        reader.cancel()
    task = await get(base, "/agents/coder", task_id)
    assert task["status"]["state"] == "completed", (task["status"], team.logs())
    ids = [i for i, _ in events]
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"every event once, in order: {ids}"
    said = texts_of(task)
    assert any(
        t.startswith("Worker box:w1 running this task stopped renewing its lease") and "(attempt 2)" in t
        for t in said
    ), said
    assert "Worker box:w2 goes on with this task from its checkpoint (attempt 2)." in said, said
    assert (team.workspace("w2", context) / "a.txt").read_text() == "first\n", "the workspace was restored"
    assert resumed_requests(team.fake, BUSY), "the resumed CLI went on with the first run's conversation"
    sessions = [(e.get("metadata") or {}).get("session", {}).get("sessionId") for _, e in events]
    reported = [s for s in sessions if s]
    assert len(reported) == 2 and reported[0] == reported[1], f"w2's CLI resumed w1's session: {reported}"
    [attempt] = task["metadata"]["attempts"]
    assert (attempt["attempt"], attempt["previous"]) == (2, "worker box:w1")
    team.workers.pop("w2").stop()
    # The console's task page, through nginx, lists the attempt.
    async with launch() as browser:
        page = await (await browser.new_context()).new_page()
        await sign_in(page, base, "alice", f"/console/tasks/{task_id}")
        attempts = page.locator("#task-attempts")
        await expect(attempts).to_contain_text("Attempt 2: worker box:w1 stopped", timeout=30_000)
        await expect(attempts.locator("> span")).to_have_text("2")


async def test_a_task_waiting_for_approval_on_a_killed_worker_is_answered_on_another(team: Team) -> None:
    """The task asks (approvals on: `AGENT_FORCE=false`), its worker dies while it waits; the answer, sent
    through nginx, is written for the worker, whose lease then goes void: the reaper hands the task on, and
    the next worker of the role restores the session and tells the CLI the answer its predecessor never
    had."""
    base = team.cluster.nginx_url
    w3 = team.worker("w3", AGENT_FORCE="false")
    await until_listed(base, "coder", True, headers=key_of("alice"))
    first = "RUN: echo asked > b.txt"
    sent = await start(base, "/agents/coder", message(first))
    task_id, context = sent["id"], sent["contextId"]
    await until(
        base, "/agents/coder", task_id, lambda t: t["status"]["state"] in ENDED | {"input-required"}, team
    )
    await checkpoint_after(team, task_id)
    w3.kill()
    team.worker("w4", AGENT_FORCE="false")
    await start(base, "/agents/coder", message("y", taskId=task_id, contextId=context))
    task = await until(base, "/agents/coder", task_id, lambda t: t["status"]["state"] in ENDED, team)
    assert task["status"]["state"] == "completed", (task["status"], team.logs())
    told = "may not have received:\ny"
    carried = [p for p in team.fake.prompts() if any(first in x for x in p) and any(told in x for x in p)]
    assert carried, ("w4's CLI went on with w3's conversation, told the answer", team.fake.prompts()[-3:])
    assert team.workspace("w4", context).is_dir(), "the workspace was restored on w4"
    team.workers.pop("w4").stop()


async def test_a_replica_killed_mid_task_hands_its_session_to_the_other(team: Team) -> None:
    cluster = team.cluster
    events: list[tuple[int, dict[str, Any]]] = []
    # Sent to replica 0 itself, which runs it (a free slot); followed through nginx from the start.
    sent = await start(cluster.urls[0], "", message(BUSY))
    task_id, context = sent["id"], sent["contextId"]
    dead = cluster.replicas[0].replica_id
    await checkpoint_after(team, task_id, "a.txt")
    reader = asyncio.create_task(resubscribe(cluster.urls[1], task_id, events))  # the one that lives
    try:
        async with asyncio.timeout(WAIT_S):
            while not events:
                await asyncio.sleep(0.1)
        await asyncio.to_thread(cluster.kill, 0)
        await asyncio.wait_for(reader, WAIT_S)
    finally:
        reader.cancel()
    task = await get(cluster.nginx_url, "", task_id)
    assert task["status"]["state"] == "completed", (task["status"], team.logs())
    ids = [i for i, _ in events]
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"every event once, in order: {ids}"
    said = texts_of(task)
    other = cluster.replicas[1].replica_id
    assert any(t.startswith(f"Replica {dead} running this task stopped renewing") for t in said), said
    assert f"Replica {other} goes on with this task from its checkpoint (attempt 2)." in said, said
    assert (team.workspace(other, context) / "a.txt").read_text() == "first\n"
    await asyncio.to_thread(cluster.restart, 0)


async def test_a_replica_stopped_with_sigterm_drains_its_three_cli_tasks_to_the_other(team: Team) -> None:
    cluster = team.cluster
    ids: list[tuple[str, str]] = []
    for n in range(3):
        text = f"RUN: echo task{n} > c.txt && sleep 600"
        sent = await start(cluster.urls[0], "", message(text))
        ids.append((sent["id"], sent["contextId"]))
    first = cluster.replicas[0].replica_id
    for task_id, _context in ids:
        await checkpoint_after(team, task_id, "c.txt")
    await asyncio.to_thread(cluster.terminate, 0, True)
    other = cluster.replicas[1].replica_id
    for n, (task_id, context) in enumerate(ids):
        task = await until(cluster.nginx_url, "", task_id, lambda t: t["status"]["state"] in ENDED, team)
        assert task["status"]["state"] == "completed", (task["status"], team.logs())
        said = texts_of(task)
        drained = f"Replica {first} shut down while this task was running."
        assert any(t.startswith(drained) for t in said), said
        assert f"Replica {other} goes on with this task from its checkpoint (attempt 2)." in said, said
        assert (team.workspace(other, context) / "c.txt").read_text() == f"task{n}\n"
    await asyncio.to_thread(cluster.restart, 0)


async def resubscribe(base: str, task_id: str, into: list[tuple[int, dict[str, Any]]]) -> None:
    """`tasks/resubscribe` through nginx from the task's first event; each event with its SSE id."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": task_id}}
    headers = {**key_of("alice"), "Last-Event-ID": "0"}
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60, read=None), headers=headers) as c:
        async with aconnect_sse(c, "POST", "/a2a/jsonrpc", json=body) as source:
            async for sse in source.aiter_sse():
                if sse.data:
                    into.append((int(sse.id), json.loads(sse.data)["result"]))
