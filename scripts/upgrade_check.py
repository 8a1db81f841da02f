"""`make upgrade-check`: the previous release and this code side by side on one database, rolled with no 5xx.

    make upgrade-check
    .venv/bin/python -m scripts.upgrade_check --database-url postgresql+asyncpg://... --redis-url redis://...

The previous release is the newest one in RELEASES that is not this checkout's tree (scripts/releases.py),
run from its own code and venv (.cache/releases/<commit>/, made once). On a fresh PostgreSQL database:

1. The release migrates the database to its own head and serves (replica a2a-1) behind nginx; a task is left
   waiting for input, with a stream open on it through nginx; a load of blocking sends through nginx starts
   and runs until the end.
2. This code migrates the database to its head while the release serves (`alembic upgrade` under load).
3. This code's replica (a2a-2) starts and nginx sends to both. Across the versions, directly to each replica:
   blocking sends (v0.3 and v1.0), a stream started on one and resumed on the other with `Last-Event-ID`
   (both ways), input-required answered on the other (both ways), a cancel on the other, GetTask and ListTasks
   of each other's tasks.
4. The roll: nginx stops sending to a2a-1 (reloaded without it), a2a-1 is stopped (SIGTERM) and started
   again with this code, and nginx sends to both. The stream open on the release since step 1 ends with its
   farewell and is resumed through nginx; the task it follows is answered and completes.
5. Every task the check made is in its expected final state (completed, one canceled) on both replicas;
   ListTasks counts all of them; no answer was a 5xx, not even in nginx's access log; no replica logged a
   traceback.
6. The next roll loses no running coding task: this code's a2a-2 runs three CLI tasks of the role `coder` (the
   `ndjson` adapter's fake CLI, tests/support/fakes/ndjson_agent.py `WORK`), each with a checkpoint saved; it
   is stopped (SIGTERM), drains them, and each goes on on a2a-1 from its checkpoint and completes, with one
   attempt naming a2a-2. (The previous release cannot drain, so this is this code rolled onto itself.)

Exit status 0 when all holds; otherwise each problem is printed. `run()` is what the test calls
(tests/cluster/test_upgrade.py). PostgreSQL and Redis are given; the check owns only its replicas, nginx
and its database (dropped at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from scripts.cluster import Cluster
from scripts.releases import Prepared, Release, ReleaseError, prepare, previous

FAKE_CLI = Path(__file__).resolve().parents[1] / "tests" / "support" / "fakes"
CODER = "/agents/coder"
"""The role of the coding tasks of step 6."""
ENV = {
    "AGENT_ADAPTER": "scripted",
    "AGENTS": json.dumps(
        {
            "default": {"adapter": "scripted"},
            "coder": {"adapter": "ndjson", "command": f"{sys.executable} {FAKE_CLI / 'ndjson_agent.py'}"},
        }
    ),
    "AGENT_SANDBOX_READ": str(FAKE_CLI),
    "CHECKPOINT_S": "1",
    "AUTH_MODE": "off",
    "LOG_LEVEL": "warning",
    "SSE_KEEPALIVE_S": "1",
    "TASK_RATE_PER_MIN": "0",
    "MAX_STREAMS_PER_PRINCIPAL": "0",
}
"""Every replica's settings (both versions know them): the scripted test agent, a CLI role for step 6 (a
checkpoint every second: the release ignores the setting), no credentials."""

READYZ_WANTS_OWN_HEAD = {
    "73b6970c937972ab2179c4ae97ec448133ea2e1c": "its /readyz wants the database at its own head exactly",
}
"""Releases whose /readyz answers 503 once the database is migrated past them (fixed after them): the check
waits on their /healthz instead and notes it. Any other release answering 503 there is a problem."""

TERMINAL = {"completed", "failed", "canceled", "rejected"}
STEP_TIMEOUT_S = 30.0
SENDS = frozenset({"message/send", "SendMessage"})
CUT = (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)
"""A connection closed under a request before any answer came."""


@dataclass
class Report:
    release: Release
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tasks: int = 0
    load_sends: int = 0
    requests: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = "passed" if self.ok else f"FAILED ({len(self.problems)} problem(s))"
        lines = [
            f"upgrade-check {head}: release {self.release} -> this code in {self.seconds:.0f} s; "
            f"{self.tasks} tasks ({self.load_sends} of them the load through nginx), {self.requests} answers"
        ]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


class CheckFailed(AssertionError):
    pass


def _state(task: dict[str, Any]) -> str:
    """A task's state in v0.3 words (v1.0's TASK_STATE_INPUT_REQUIRED -> input-required)."""
    state = task["status"]["state"]
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _text(message: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": message}],
        **fields,
    }


class Driver:
    """The client side: JSON-RPC calls and SSE streams, every answer's status recorded."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.ids = itertools.count(1)
        self.expected: dict[str, str] = {}
        """task id -> the final state it must end in."""
        self.five_xx: list[str] = []
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(STEP_TIMEOUT_S, connect=5), event_hooks={"response": [self._seen]}
        )

    async def _seen(self, resp: httpx.Response) -> None:
        self.report.requests += 1
        # /readyz is a probe, judged where it is read (a 503 there is an answer, not a failure).
        if resp.status_code >= 500 and resp.request.url.path != "/readyz":
            self.five_xx.append(f"{resp.status_code} from {resp.request.method} {resp.request.url}")

    def problem(self, text: str) -> None:
        self.report.problems.append(text)

    def check(self, ok: bool, text: str) -> None:
        if not ok:
            raise CheckFailed(text)

    # -- calls -----------------------------------------------------------------------------------------------

    async def rpc(self, base: str, method: str, params: Any, v10: bool = False) -> Any:
        """One call; a send carries an Idempotency-Key and, cut before any answer (nginx closing a kept-alive
        connection as a reload retires its old workers), is sent once more with it, as a client would: the
        server answers the copy with the one task (`_final` counts them), and the report notes the cut."""
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        headers = {"A2A-Version": "1.0"} if v10 else {}
        send = method in SENDS
        if send:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        try:
            resp = await self.client.post(f"{base}/a2a/jsonrpc", json=body, headers=headers)
        except CUT as exc:
            if not send:
                raise
            self.report.notes.append(
                f"{method} at {base} cut before an answer ({_describe(exc)}); sent again"
            )
            resp = await self.client.post(f"{base}/a2a/jsonrpc", json=body, headers=headers)
        self.check(resp.status_code == 200, f"{method} at {base}: HTTP {resp.status_code} {resp.text[:300]}")
        data = resp.json()
        self.check("error" not in data, f"{method} at {base}: {data.get('error')}")
        return data["result"]

    async def send(self, base: str, text: str, expect: str = "completed", **fields: Any) -> dict[str, Any]:
        """Blocking v0.3 message/send; the task, checked to be in `expect` (tracked when that is final)."""
        task = await self.rpc(base, "message/send", {"message": _text(text, **fields)})
        self.check(task.get("kind") == "task", f"message/send at {base} answered {task}")
        self.track(task["id"], "completed")
        self.check(_state(task) == expect, f"task {task['id']} at {base}: {_state(task)}, not {expect}")
        return task

    async def send_v10(self, base: str, text: str) -> dict[str, Any]:
        """Blocking v1.0 SendMessage; the task, completed."""
        params = {
            "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]},
            "configuration": {"returnImmediately": False},
        }
        task = (await self.rpc(base, "SendMessage", params, v10=True))["task"]
        self.track(task["id"], "completed")
        self.check(_state(task) == "completed", f"SendMessage at {base}: {_state(task)}")
        return task

    def track(self, task_id: str, final: str) -> None:
        if task_id not in self.expected:
            self.report.tasks += 1
        self.expected[task_id] = final

    async def get(self, base: str, task_id: str) -> dict[str, Any]:
        return await self.rpc(base, "tasks/get", {"id": task_id})

    async def get_v10(self, base: str, task_id: str) -> dict[str, Any]:
        return await self.rpc(base, "GetTask", {"id": task_id}, v10=True)

    async def list_v10(self, base: str) -> tuple[set[str], int]:
        """Every task ListTasks shows at `base` (all pages), and its totalSize."""
        ids: set[str] = set()
        token = ""
        while True:
            params: dict[str, Any] = {"pageSize": 100}
            if token:
                params["pageToken"] = token
            page = await self.rpc(base, "ListTasks", params, v10=True)
            ids |= {t["id"] for t in page.get("tasks", [])}
            total = int(page.get("totalSize", 0))
            token = page.get("nextPageToken", "")
            if not token:
                return ids, total

    async def sse(
        self, base: str, method: str, params: Any, last_id: int | None = None
    ) -> AsyncIterator[tuple[int | None, Any]]:
        """A v0.3 JSON-RPC stream: (SSE id, result) per event; ends when the server ends it."""
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
        async with self.client.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=headers) as resp:
            self.check(resp.status_code == 200, f"{method} at {base}: HTTP {resp.status_code}")
            self.check(
                resp.headers.get("content-type", "").startswith("text/event-stream"),
                f"{method} at {base}: not a stream ({resp.headers.get('content-type')})",
            )
            sse_id: int | None = None
            data: list[str] = []
            async for line in resp.aiter_lines():
                if line.startswith("id:"):
                    sse_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    msg = json.loads("\n".join(data))
                    self.check("error" not in msg, f"{method} at {base}: {msg.get('error')}")
                    yield sse_id, msg["result"]
                    sse_id, data = None, []

    async def close(self) -> None:
        await self.client.aclose()


def _event_state(result: dict[str, Any]) -> str | None:
    if result.get("kind") == "status-update":
        return result["status"]["state"]
    if result.get("kind") == "task":
        return result["status"]["state"]
    return None


class Follower:
    """Follows one task's stream from its first event to its end, across replicas and reconnections:
    every SSE id must be the one after the last (nothing lost, nothing twice)."""

    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self.task_id: str | None = None
        self.last: int | None = None
        self.events: list[tuple[int, Any]] = []
        self.state: str | None = None
        self.ends = 0
        """Streams that ended before the task did (a farewell, a replica gone)."""
        self._stream: AsyncIterator[tuple[int | None, Any]] | None = None

    async def _read(self, until: Callable[[str | None], bool] | None) -> bool:
        """Read the open stream until it ends (False) or `until(state)` holds or the task ends (True: the
        stream stays open, to read on or to `drop`)."""
        assert self._stream is not None
        async for sse_id, result in self._stream:
            if self.task_id is None:
                self.task_id = result.get("id") or result.get("taskId")
            if sse_id is not None:
                if self.last is not None:
                    self.d.check(
                        sse_id == self.last + 1,
                        f"task {self.task_id}: event {sse_id} after {self.last} (lost or repeated events)",
                    )
                self.last = sse_id
                self.events.append((sse_id, result))
            self.state = _event_state(result) or self.state
            if self.state in TERMINAL or (until is not None and until(self.state)):
                return True
        self._stream = None
        return False

    async def start(self, base: str, text: str, until: Callable[[str | None], bool]) -> None:
        """message/stream at `base`, read until `until` holds; the stream is left open."""
        self._stream = self.d.sse(base, "message/stream", {"message": _text(text)})
        await self._read(until)
        self.d.check(self.task_id is not None, f"message/stream at {base} gave no task")
        self.d.track(self.task_id, "completed")

    async def drop(self) -> None:
        """Disconnect, as a client that goes away."""
        if self._stream is not None:
            await self._stream.aclose()  # type: ignore[attr-defined]
            self._stream = None

    async def follow(self, base: str) -> None:
        """Read on until the task ends: the open stream first, then, whenever a stream ends early,
        tasks/resubscribe at `base` with Last-Event-ID."""
        idle = 0
        while True:
            seen = len(self.events)
            if self._stream is None:
                self._stream = self.d.sse(base, "tasks/resubscribe", {"id": self.task_id}, last_id=self.last)
            if await self._read(None):
                await self.drop()
                return
            self.ends += 1
            idle = 0 if len(self.events) > seen else idle + 1
            self.d.check(idle < 50, f"task {self.task_id}: streams at {base} keep ending with no event")
            await asyncio.sleep(0.1)


def _input_required(state: str | None) -> bool:
    return state == "input-required"


def _after(n: int) -> Callable[[str | None], bool]:
    """True from the n-th event read on (the first call counts 1)."""
    seen = itertools.count(1)
    return lambda _state: next(seen) >= n


async def _fresh_database(base_url: str) -> str:
    name = f"a2a_upgrade_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(base_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base_url.rsplit("/", 1)[0] + "/" + name


async def _drop_database(url: str) -> None:
    base, name = url.rsplit("/", 1)
    conn = await asyncpg.connect(f"{base}/postgres".replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _migrate_with(prepared: Prepared, cluster: Cluster) -> None:
    done = subprocess.run(
        [str(prepared.server), "migrate"],
        cwd=prepared.src,
        env=cluster.replica_env(cluster.replicas[0]),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise CheckFailed(f"release {prepared.release} could not migrate:\n{done.stdout}{done.stderr}")


async def _status(driver: Driver, url: str) -> tuple[int, dict[str, Any]]:
    resp = await driver.client.get(url)
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, {}


class Load:
    """Blocking sends through nginx, one after another (v0.3 and v1.0 in turn), until stopped; its first
    failure ends it and is the check's."""

    def __init__(self, driver: Driver, nginx: str) -> None:
        self.d = driver
        self.nginx = nginx
        self.sent = 0
        self.failure: str | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while not self._stop.is_set():
                n = self.sent
                if n % 2:
                    await self.d.send_v10(self.nginx, f"say:load {n}")
                else:
                    await self.d.send(self.nginx, f"say:load {n};tool:Read")
                self.sent += 1
                await asyncio.sleep(0.02)
        except Exception as exc:
            self.failure = f"the load through nginx, send {self.sent + 1}: {_describe(exc)}"

    async def advanced(self, n: int) -> None:
        """Return once `n` more sends have been answered."""
        target = self.sent + n
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while self.sent < target:
            self.d.check(self.failure is None, str(self.failure))
            self.d.check(time.monotonic() < deadline, f"the load made no {n} sends in {STEP_TIMEOUT_S}s")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        if self.failure is not None and self.failure not in self.d.report.problems:
            self.d.problem(self.failure)


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, CheckFailed) else f"{type(exc).__name__}: {exc}"


async def _scenario(d: Driver, cluster: Cluster, prepared: Prepared, report: Report) -> None:
    nginx = cluster.nginx_url
    loop = asyncio.get_running_loop()

    # 1. The release alone, on its own schema, behind nginx.
    await loop.run_in_executor(None, _migrate_with, prepared, cluster)
    await loop.run_in_executor(None, cluster.start_replica, 0)
    cluster.routed = {0}
    await loop.run_in_executor(None, cluster.start_nginx)
    await d.send(nginx, "say:before the migration")
    held = Follower(d)  # a stream through nginx, open on the release until it is stopped in step 4
    await held.start(nginx, "say:waiting;ask:Go on after the roll?", _input_required)
    held_task = asyncio.create_task(held.follow(nginx))
    load = Load(d, nginx)
    load.start()
    try:
        await _mixed(d, cluster, prepared, report)
        await _roll(d, cluster, load)
        # The task held since step 1, answered through nginx; its stream, resumed after the farewell, ends.
        task = await d.get(nginx, held.task_id)
        await d.send(nginx, "after the roll", taskId=held.task_id, contextId=task["contextId"])
        await asyncio.wait_for(asyncio.shield(held_task), STEP_TIMEOUT_S)
        d.check(held.state == "completed", f"the held stream ended at {held.state}")
        d.check(held.ends >= 1, "the held stream never moved off the stopped release")
        for base in cluster.urls:
            await d.send(base, "say:after the roll")
    finally:
        held_task.cancel()
        await load.stop()
        report.load_sends = load.sent
    await _final(d, cluster)
    await _drain(d, cluster)


async def _mixed(d: Driver, cluster: Cluster, prepared: Prepared, report: Report) -> None:
    """Steps 2 and 3: this code's migrations under the release, then both versions side by side."""
    old, new = cluster.replicas[0], cluster.replicas[1]
    nginx = cluster.nginx_url
    loop = asyncio.get_running_loop()

    # 2. This code's migrations while the release serves.
    await loop.run_in_executor(None, cluster.migrate)
    await d.send(old.url, "say:after the migration, on the release")
    code, body = await _status(d, old.url + "/readyz")
    if code != 200:
        why = READYZ_WANTS_OWN_HEAD.get(prepared.release.commit)
        if why is None:
            d.problem(f"release {prepared.release}'s /readyz answers {code} on the migrated database: {body}")
        else:
            report.notes.append(f"release {prepared.release}: /readyz {code} on the new schema ({why})")
        old.ready_path = "/healthz"

    # 3. This code beside it; nginx sends to both.
    await loop.run_in_executor(None, cluster.start_replica, 1)
    await loop.run_in_executor(None, cluster.route, None)
    for url in (old.url, new.url, nginx):
        code, _ = await _status(d, url + "/.well-known/agent-card.json")
        d.check(code == 200, f"agent card at {url}: HTTP {code}")
    for base in (old.url, new.url):
        await d.send(base, "say:blocking;tool:Read")
        await d.send_v10(base, "say:blocking v1.0")
    for n in range(4):
        await d.send(nginx, f"say:through nginx {n}")

    # Streams resumed on the other version with Last-Event-ID.
    for first, other in ((old, new), (new, old)):
        f = Follower(d)
        await f.start(first.url, "chunks:3;sleep:1;chunks:3", _after(3))
        await f.drop()
        await f.follow(other.url)
        d.check(f.state == "completed", f"stream from {first.replica_id} to {other.replica_id}: {f.state}")
        ids = [i for i, _ in f.events]
        d.check(ids == list(range(ids[0], ids[0] + len(ids))), f"stream ids not dense: {ids}")

    # input-required answered on the other version; GetTask (v0.3 and v1.0) both ways.
    for first, other in ((old, new), (new, old)):
        task = await d.send(first.url, "say:asking;ask:Which way?", expect="input-required")
        done = await d.send(
            other.url, "the other way", taskId=task["id"], contextId=task["contextId"], expect="completed"
        )
        d.check("answer:the other way" in json.dumps(done), f"answer lost across versions: {done}")
        for base in (first.url, other.url):
            got = await d.get(base, task["id"])
            d.check(_state(got) == "completed", f"tasks/get at {base}: {_state(got)}")
            got = await d.get_v10(base, task["id"])
            d.check(_state(got) == "completed", f"GetTask at {base}: {_state(got)}")

    # A cancel sent to the other version reaches the holder.
    for first, other in ((old, new), (new, old)):
        params = {"message": _text("sleep:30"), "configuration": {"blocking": False}}
        task = await d.rpc(first.url, "message/send", params)
        d.track(task["id"], "canceled")
        canceled = await d.rpc(other.url, "tasks/cancel", {"id": task["id"]})
        d.check(_state(canceled) == "canceled", f"cancel via {other.replica_id}: {_state(canceled)}")

    for base in (old.url, new.url):
        made = set(d.expected)  # before the call: the load goes on making tasks
        ids, _ = await d.list_v10(base)
        missing = made - ids
        d.check(not missing, f"ListTasks at {base} misses {len(missing)} task(s): {sorted(missing)[:3]}")


async def _roll(d: Driver, cluster: Cluster, load: Load) -> None:
    """4. a2a-1 out of nginx, stopped once what it was sent has ended, back with this code, back in nginx."""
    old = cluster.replicas[0]
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, cluster.route, [1])
    # The load sends one at a time: two more sends through nginx and its last one on a2a-1 has ended.
    await load.advanced(2)
    await loop.run_in_executor(None, cluster.terminate, 0)
    old.server = old.cwd = None
    old.ready_path = "/readyz"
    await loop.run_in_executor(None, cluster.start_replica, 0)
    await loop.run_in_executor(None, cluster.route, None)


async def _final(d: Driver, cluster: Cluster) -> None:
    """5. Every task where it should be, on both replicas."""
    for base in cluster.urls:
        ids, total = await d.list_v10(base)
        d.check(set(d.expected) <= ids, f"ListTasks at {base} misses tasks")
        d.check(total == len(d.expected), f"ListTasks at {base}: totalSize {total}, {len(d.expected)} made")
        wrong = []
        for task_id, final in d.expected.items():
            got = _state(await d.get(base, task_id))
            if got != final:
                wrong.append(f"{task_id}: {got} (want {final})")
        d.check(not wrong, f"tasks not as expected at {base}: {wrong[:5]}")


async def _drain(d: Driver, cluster: Cluster) -> None:
    """6. a2a-2 stopped while its CLI tasks work: each drained, handed on, completed on a2a-1."""
    new, other = cluster.replicas[1], cluster.replicas[0]
    loop = asyncio.get_running_loop()
    ids = []
    for _ in range(3):
        params = {"message": _text("WORK 120 0.5"), "configuration": {"blocking": False}}
        ids.append((await d.rpc(new.url + CODER, "message/send", params))["id"])
    dsn = cluster.database_url.replace("postgresql+asyncpg://", "postgresql://")
    deadline = time.monotonic() + STEP_TIMEOUT_S * 4
    while True:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT task_id FROM task_checkpoints WHERE task_id = ANY($1)", ids)
        finally:
            await conn.close()
        if len(rows) == len(ids):
            break
        d.check(time.monotonic() < deadline, f"CLI tasks {ids} on {new.replica_id}: no checkpoint of each")
        await asyncio.sleep(0.2)
    await loop.run_in_executor(None, cluster.terminate, 1)
    for task_id in ids:
        deadline = time.monotonic() + STEP_TIMEOUT_S * 4
        while _state(task := await d.get(other.url + CODER, task_id)) not in TERMINAL:
            d.check(time.monotonic() < deadline, f"CLI task {task_id}, drained from {new.replica_id}: stuck")
            await asyncio.sleep(0.2)
        d.check(_state(task) == "completed", f"CLI task {task_id}, drained: {_state(task)} {task['status']}")
        attempts = [(a.get("attempt"), a.get("previous")) for a in task["metadata"].get("attempts", [])]
        d.check(attempts == [(2, f"replica {new.replica_id}")], f"CLI task {task_id}: attempts {attempts}")
    d.report.notes.append(
        f"{len(ids)} CLI tasks drained from {new.replica_id} completed on {other.replica_id}"
    )
    await loop.run_in_executor(None, cluster.start_replica, 1)


def run(
    database_url: str,
    redis_url: str,
    workdir: Path,
    release: Release | None = None,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
) -> Report:
    """The whole check on a fresh database of the PostgreSQL at `database_url`; the report (never raises
    for what the check finds: see `Report.problems`)."""
    started = time.monotonic()
    _fresh_workdir(workdir)
    release = release or previous()
    report = Report(release)
    prepared = prepare(release, log=log)
    log(f"upgrade-check: release {release} beside this code; logs in {workdir}")
    db = asyncio.run(_fresh_database(database_url))
    places = {"AGENT_WORKSPACE_ROOT": str(workdir / "workspaces"), "REPO_CACHE_ROOT": str(workdir / "repos")}
    cluster = Cluster(db, redis_url, workdir, 2, env={**ENV, **places})
    cluster.replicas[0].server, cluster.replicas[0].cwd = prepared.server, prepared.src

    async def drive() -> None:
        d = Driver(report)
        try:
            await _scenario(d, cluster, prepared, report)
        except Exception as exc:  # what the check found (CheckFailed), or a call that failed outright
            d.problem(_describe(exc))
        finally:
            await d.close()
            report.problems += [f"HTTP {line}" for line in d.five_xx]

    try:
        asyncio.run(drive())
    except RuntimeError as exc:  # a replica or nginx that would not start
        report.problems.append(str(exc))
    finally:
        cluster.stop()
        asyncio.run(_drop_database(db))
    report.problems += _logged_problems(cluster)
    report.seconds = time.monotonic() - started
    return report


_MARK = ".upgrade-check"


def _fresh_workdir(workdir: Path) -> None:
    """Empty a folder of an earlier run (its logs would be read again); refuse any other non-empty one."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / _MARK).exists():
            raise ValueError(f"{workdir} is not empty and not an earlier upgrade check's folder")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / _MARK).touch()


def _logged_problems(cluster: Cluster) -> list[str]:
    out = []
    access = cluster.nginx_dir / "access.log"
    if access.exists():
        statuses = re.findall(r'" (\d{3}) ', access.read_text(errors="replace"))
        bad = [s for s in statuses if s.startswith("5")]
        if bad:
            out.append(f"nginx answered {len(bad)} 5xx of {len(statuses)} ({access})")
    for r in cluster.replicas:
        text = r.log_path.read_text(errors="replace") if r.log_path.exists() else ""
        if "Traceback" in text or "never retrieved" in text:
            out.append(f"{r.replica_id} logged a traceback ({r.log_path})")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.upgrade_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("TEST_POSTGRES_URL"), help="a PostgreSQL")
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/a2a-upgrade-check"))
    args = parser.parse_args(argv)
    if not args.database_url or not args.redis_url:
        parser.error("give --database-url and --redis-url (or TEST_POSTGRES_URL and TEST_REDIS_URL)")
    try:
        report = run(args.database_url, args.redis_url, args.workdir)
    except (ReleaseError, ValueError) as exc:
        sys.exit(f"upgrade-check: {exc}")
    print(report.summary(), flush=True)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
