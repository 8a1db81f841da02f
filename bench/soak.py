"""`make soak` (issue #33): a long, steady mixed load against the `make cluster` topology while faults come in
turn, then what was lost, doubled, stuck or missed.

    .venv/bin/python -m bench.soak --duration-min 60 --fault-every-s 300      # what `make soak` runs
    .venv/bin/python -m bench.soak --duration-min 4 --fault-every-s 40 --pg-down-s 10 --baseline-min 1.3

The topology is `scripts/cluster.py`'s (tests/support/cluster.py's `Cluster`, the scripted test agent): 3
replicas behind nginx, on a PostgreSQL and a Redis of the run's own (tests/support/own_services.py, free
ports: the faults stop and restart them), plus one remote worker (`a2a-server worker`, its role `remote` run
nowhere else) connected through nginx and listed in `GET /agents` before the load starts.

The load (`--clients` loops, through nginx, each operation alternately over v0.3 and v1.0 JSON-RPC): blocking
sends, streamed sends (resumed with `Last-Event-ID` when cut), non-blocking sends followed by a subscription
that is cut on purpose after a few events and resumed with `Last-Event-ID`, multi-turn tasks (a question and
its answer; some parked and answered a fault later, the last of them left waiting on purpose), cancels, sends
with a webhook, the remote worker's role blocking and streamed; and a poller doing what the console does
(`/console/api/tasks?changedAfter=`, a task's page) with `ListTasks` (JSON-RPC and REST). Every send carries
an `Idempotency-Key` and a marker in its text; a client retries connection errors, 502, 503 and 504 (after
`Retry-After`) as a real client would, for up to `OP_DEADLINE_S`.

A fault every `--fault-every-s`, in the middle of each window, in turn: `kill -9` of a replica (each in
turn) and its restart, Redis restart, PostgreSQL restart, PostgreSQL down `--pg-down-s`, `kill -9` of the
worker and its restart, nginx reload. Each waits for its recovery on a condition (a replica's /readyz, the
worker serving again, nginx answering from every replica).

Per window: requests, errors by kind, p50/p99 of answered requests, and for every process (replicas,
worker, nginx, Redis, PostgreSQL, this harness) RSS, open fds and database connections (pg_stat_activity
rows whose client port is one of the process's sockets), medians of the samples. An error is a failure
unless excused: a 503 with `Retry-After` while PostgreSQL or Redis is away or a replica is killed (an answer
forwarded to the killed holder: docs/operations.md), a connection error or a cut stream while a replica is
killed or nginx reloads, nginx's 502 for a POST that had reached the killed
replica (docs/operations.md). At the end, once every task
has ended: tasks lost (acknowledged, not stored), doubled (two tasks of one send, or a turn whose run started
twice: the scripted agent is not `pure`, so a run is started once and a lost one ends `failed`),
stuck (not ended), events missing or out of order on any stream, webhooks that never got their task's final
state, and RSS / fds of each replica against their value at `--baseline-min` (per process life: a replica
restarted later is compared with itself as old). Targets are printed MET / NOT MET; the exit status is 1 if
any is not met. The report is also written as `report.json` in `--workdir`, beside every process's log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.api.edge.auth import hash_key
from scripts.ready import log_tail
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.receiver import Receiver
from tests.support.sse import ENDED, V10, v10_as_v03
from tests.support.worker import WorkerProcess, until_listed

FAULTS = ("replica-kill", "redis-restart", "pg-restart", "pg-down", "worker-kill", "nginx-reload")
OUTAGES = {"redis-restart", "pg-restart", "pg-down", "replica-kill"}
"""Faults during which a 503 with Retry-After is the documented answer (a replica killed: to an answer
forwarded to it while it held the task)."""
CUTS = {"replica-kill", "nginx-reload"}
"""Faults during which a connection error or a cut stream is what a client sees; and, while a replica is
killed, nginx's 502 for a POST that had reached it (never retried: docs/operations.md)."""
EXCUSE_GRACE_S = 3.0
"""How long after a fault's recovery an answer it caused may still arrive."""
SETTLE_S = 5.0
"""How long after a fault's recovery its effect on RSS and fds (connections closed, made again) lasts."""
OP_DEADLINE_S = 240.0
"""How long one operation retries (longer than PostgreSQL's outage and a replica's restart)."""
READY_S = 180.0
"""How long a recovery may take on a busy machine."""
WORKER_ROLE = "remote"
AGENTS = {
    "default": {"adapter": "scripted"},
    WORKER_ROLE: {"adapter": "scripted", "card": {"name": "Remote"}},
}
JSONRPC = "/a2a/jsonrpc"
MARKER = re.compile(r"soak-\d+-[0-9a-f]{8}")
WAITING = "input-required"
RETRY_STATUSES = {502, 503, 504}


def cluster_env(worker_key: str, receiver_host: str = "127.0.0.1") -> dict[str, str]:
    """Every replica's settings beside the test defaults (tests/support/cluster.py)."""
    return {
        "AGENTS": json.dumps(AGENTS),
        "AGENT_ROLES": "default",
        "WORKER_KEYS": json.dumps({hash_key(worker_key): "soak"}),
        "LEASE_TTL_S": "5",
        "QUEUE_POLL_S": "0.5",
        "DB_OUTAGE_GRACE_S": "120",
        "DISCOVERY_HEARTBEAT_S": "1",
        "DISCOVERY_MAX_AGE_S": "15",
        "ROLE_WAIT_S": "120",
        "PUSH_NOTIFICATION_ALLOW_HTTP": "true",
        "PUSH_NOTIFICATION_ALLOWED_HOSTS": receiver_host,
        "PUSH_BACKOFF_S": "0.2",
        "PUSH_BACKOFF_MAX_S": "2",
        "PUSH_POLL_S": "0.2",
        "PUSH_CLAIM_TTL_S": "3",
        "PUSH_TIMEOUT_S": "5",
        "PUSH_MAX_ATTEMPTS": "30",
        "LOG_LEVEL": os.environ.get("SOAK_LOG_LEVEL", "warning"),
    }


@dataclass
class Config:
    duration_s: float = 3600.0
    fault_every_s: float = 300.0
    pg_down_s: float = 30.0
    baseline_s: float = 600.0
    """RSS and fds are compared with their median over the window that ends this long after a process's
    start (the load's start for the first processes)."""
    clients: int = 6
    sample_s: float = 5.0
    workdir: Path = Path("/tmp/a2a-soak")
    drain_s: float = 300.0
    """How long the end may wait for operations to finish, tasks to end and webhooks to arrive."""
    worker_key: str = field(default_factory=lambda: "soak-worker-" + uuid.uuid4().hex)
    faults: tuple[str, ...] = FAULTS
    tolerance: float = 0.10

    @property
    def windows(self) -> int:
        return max(1, math.ceil(self.duration_s / self.fault_every_s - 1e-9))


# ---- what the clients saw ------------------------------------------------------------------------------


@dataclass(slots=True)
class Req:
    start: float
    answered: float | None
    """When the answer (its headers) came, None for a connection error."""
    end: float
    op: str
    version: str
    raw: str
    """`ok`, `http:<status>` (`+ra` with Retry-After), `rpc:<code>`, `conn:<exception>` or
    `cut:<exception>` (a stream broken after its headers)."""
    detail: str = ""
    """What came back, for an error: the request and the start of the answer."""


@dataclass
class Tracked:
    """One send of the load: its marker (in its text), and what the client learned."""

    marker: str
    op: str
    version: str
    role: str
    task_id: str | None = None
    gave_up: bool = False
    parked: bool = False
    """Left waiting for its answer on purpose (answered a fault later, or never: the run's last)."""
    hook: str | None = None


@dataclass
class StreamRecord:
    """The events one client saw of one task, over all its connections: (seq, kind, state, final)."""

    marker: str
    op: str
    version: str
    task_id: str | None = None
    events: list[tuple[int, str, str | None, bool]] = field(default_factory=list)
    connections: int = 0
    refused: bool = False
    """A v1.0 resume refused (-32004): the task had ended meanwhile, nothing left to subscribe to."""
    failed: bool = False
    """Given up on an answer that was no stream (the problem is listed)."""
    done: bool = False

    def ended(self) -> bool:
        if not self.events:
            return False
        _, kind, state, final = self.events[-1]
        return final or (kind == "task" and state in ENDED)


@dataclass
class FaultRecord:
    name: str
    window: int
    start: float
    end: float
    detail: str


def state_of(task: dict[str, Any]) -> str:
    return task["status"]["state"].removeprefix("TASK_STATE_").lower().replace("_", "-")


def retry_after(resp: httpx.Response) -> float:
    try:
        return min(max(float(resp.headers.get("retry-after", "0.5")), 0.2), 2.0)
    except ValueError:
        return 0.5


# ---- the load ------------------------------------------------------------------------------------------


class Load:
    """The clients: `--clients` loops of operations and the console's poller, through nginx."""

    OPS = (
        "blocking",
        "stream",
        "resubscribe",
        "multiturn",
        "cancel",
        "push",
        "worker",
        "worker_stream",
        "answer_parked",
    )
    """An odd number of them: each loop alternates the versions of every operation."""

    def __init__(self, base: str, hook_url: Callable[[str], str], t0: float, park_after_s: float) -> None:
        self.base = base
        self.hook_url = hook_url
        self.t0 = t0
        self.park_after_s = park_after_s
        self.reqs: list[Req] = []
        self.tracked: list[Tracked] = []
        self.streams: list[StreamRecord] = []
        self.parked: list[tuple[float, Tracked]] = []
        self.unasked: Counter[str] = Counter()
        """How the multi-turn tasks the load never answered came back from their first send (a run lost
        to a fault ends them, so they end without an answer), by state."""
        self.stopping = asyncio.Event()
        self.problems: list[str] = []
        self._n = itertools.count(1)
        self._ids = itertools.count(1)
        self._turns = itertools.count()
        self.http = httpx.AsyncClient(
            base_url=base,
            timeout=httpx.Timeout(120, connect=5),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )

    def now(self) -> float:
        return time.monotonic() - self.t0

    def track(self, op: str, version: str, role: str = "default") -> Tracked:
        t = Tracked(f"soak-{next(self._n)}-{uuid.uuid4().hex[:8]}", op, version, role)
        self.tracked.append(t)
        return t

    # -- one request, retried as a client would ----------------------------------------------------------

    def _raw(self, resp: httpx.Response, expect: tuple[int, ...]) -> str:
        if resp.status_code != 200:
            return f"http:{resp.status_code}" + ("+ra" if "retry-after" in resp.headers else "")
        if resp.headers.get("content-type", "").startswith("application/json"):
            try:
                body = resp.json()
            except ValueError:
                return "http:200-not-json"
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                code = body["error"].get("code")
                return "ok" if code in expect else f"rpc:{code}"
        return "ok"

    async def request(
        self,
        op: str,
        version: str,
        method: str,
        path: str,
        *,
        expect: tuple[int, ...] = (),
        deadline: float = OP_DEADLINE_S,
        **kwargs: Any,
    ) -> httpx.Response | None:
        give_up = time.monotonic() + deadline
        while True:
            start = self.now()

            def what() -> str:
                return f"{method} {path} {str(kwargs.get('json') or kwargs.get('params') or '')[:160]}"

            try:
                resp = await self.http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raw = f"conn:{type(exc).__name__}"
                self.reqs.append(Req(start, None, self.now(), op, version, raw, f"{what()}: {exc!r}"[:400]))
                wait = 0.5
            else:
                end = self.now()
                raw = self._raw(resp, expect)
                detail = "" if raw == "ok" else f"{what()} -> {resp.status_code} {_flat(resp.text)}"
                self.reqs.append(Req(start, end, end, op, version, raw, detail))
                if resp.status_code not in RETRY_STATUSES:
                    return resp
                wait = retry_after(resp)
            if time.monotonic() + wait > give_up:
                return None
            await asyncio.sleep(wait)

    async def rpc(
        self,
        op: str,
        version: str,
        method: str,
        params: dict[str, Any],
        *,
        role: str = "default",
        headers: dict[str, str] | None = None,
        expect: tuple[int, ...] = (),
    ) -> dict[str, Any] | None:
        """A JSON-RPC call through nginx; its response object (result or error), None if it never got one."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        hdrs = {**(V10 if version == "1.0" else {}), **(headers or {})}
        resp = await self.request(
            op, version, "POST", self.path(role), json=body, headers=hdrs, expect=expect
        )
        if resp is None or resp.status_code != 200:
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    @staticmethod
    def path(role: str) -> str:
        return JSONRPC if role == "default" else f"/agents/{role}{JSONRPC}"

    # -- message shapes ----------------------------------------------------------------------------------

    @staticmethod
    def message(version: str, text: str, task_id: str | None = None) -> dict[str, Any]:
        mid = str(uuid.uuid4())
        if version == "1.0":
            msg: dict[str, Any] = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}
        else:
            msg = {
                "kind": "message",
                "messageId": mid,
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
            }
        if task_id:
            msg["taskId"] = task_id
        return msg

    def send_params(
        self, version: str, text: str, *, blocking: bool, task_id: str | None = None, hook: str | None = None
    ) -> dict[str, Any]:
        config: dict[str, Any]
        if version == "1.0":
            config = {"returnImmediately": not blocking}
            if hook:
                config["taskPushNotificationConfig"] = {"url": self.hook_url(hook), "token": "soak"}
        else:
            config = {"blocking": blocking}
            if hook:
                config["pushNotificationConfig"] = {"url": self.hook_url(hook), "token": "soak"}
        return {"message": self.message(version, text, task_id), "configuration": config}

    async def send(
        self,
        t: Tracked,
        text: str,
        *,
        blocking: bool = True,
        task_id: str | None = None,
        hook: str | None = None,
        expect: tuple[int, ...] = (),
    ) -> dict[str, Any] | None:
        """`message/send` / `SendMessage` with an Idempotency-Key, retried; the task it answered with."""
        method = "SendMessage" if t.version == "1.0" else "message/send"
        params = self.send_params(t.version, text, blocking=blocking, task_id=task_id, hook=hook)
        key = {"Idempotency-Key": str(uuid.uuid4())}
        out = await self.rpc(t.op, t.version, method, params, role=t.role, headers=key, expect=expect)
        if out is None or "result" not in out:
            if out is None:
                t.gave_up = True
            return None
        task = out["result"].get("task", out["result"]) if t.version == "1.0" else out["result"]
        if task.get("kind", "task") != "task" or "status" not in task:
            self.problems.append(f"{t.marker}: the send answered {str(out)[:300]}")
            return None
        if t.task_id is None:
            t.task_id = task["id"]
        return task

    async def get(self, op: str, version: str, task_id: str, role: str = "default") -> dict[str, Any] | None:
        method = "GetTask" if version == "1.0" else "tasks/get"
        out = await self.rpc(op, version, method, {"id": task_id, "historyLength": 0}, role=role)
        return out.get("result") if out else None

    # -- streams -----------------------------------------------------------------------------------------

    async def follow(
        self,
        t: Tracked,
        first: tuple[str, dict[str, Any], dict[str, str]] | None,
        *,
        cut_after: int = 0,
    ) -> StreamRecord:
        """Read one task's events to its end: `first` (method, params, headers) opens the stream (a streamed
        send), else a subscription; a dropped stream resumes with `tasks/resubscribe` / `SubscribeToTask`
        and `Last-Event-ID`. With `cut_after`, the first connection is closed after that many events."""
        rec = StreamRecord(t.marker, t.op, t.version, t.task_id)
        self.streams.append(rec)
        give_up = time.monotonic() + OP_DEADLINE_S
        resume = "SubscribeToTask" if t.version == "1.0" else "tasks/resubscribe"
        while not rec.ended() and not rec.refused and not rec.failed:
            if time.monotonic() > give_up:
                t.gave_up = True
                self.problems.append(f"{t.marker} ({t.version} {t.op}): the stream never ended")
                break
            headers = dict(V10) if t.version == "1.0" else {}
            if rec.events or first is None:
                if t.task_id is None:
                    break
                method, params = resume, {"id": t.task_id}
                if rec.events:
                    headers["Last-Event-ID"] = str(rec.events[-1][0])
            else:
                method, params, extra = first
                headers.update(extra)
            body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
            wait = await self._connect(t, rec, body, headers, cut_after if rec.connections == 0 else 0)
            if wait:
                await asyncio.sleep(wait)
        rec.done = rec.ended()
        return rec

    async def _connect(
        self, t: Tracked, rec: StreamRecord, body: dict[str, Any], headers: dict[str, str], cut_after: int
    ) -> float:
        """One connection of a stream; how long to wait before the next (0: at once)."""
        start = self.now()
        answered: float | None = None
        seen = 0
        try:
            async with self.http.stream(
                "POST",
                self.path(t.role),
                json=body,
                headers=headers,
                timeout=httpx.Timeout(30, connect=5),
            ) as resp:
                answered = self.now()
                if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    await resp.aread()
                    refused = t.version == "1.0" and body["method"] == "SubscribeToTask"
                    raw = self._raw(resp, (-32004,) if refused else ())
                    detail = (
                        "" if raw == "ok" else f"{body['method']} -> {resp.status_code} {_flat(resp.text)}"
                    )
                    self.reqs.append(Req(start, answered, self.now(), t.op, t.version, raw, detail))
                    if raw == "ok" and refused:
                        rec.refused = True
                        return 0
                    if resp.status_code in RETRY_STATUSES:
                        return retry_after(resp)
                    self.problems.append(
                        f"{t.marker}: {body['method']} answered {resp.status_code} {resp.text[:200]}"
                    )
                    t.gave_up = rec.failed = True
                    return 0
                rec.connections += 1
                raw, detail = "ok", ""
                async for sse in _events(resp):
                    data = json.loads(sse[1])
                    if "error" in data:
                        raw, detail = (
                            f"rpc:{data['error'].get('code')}",
                            f"{body['method']} -> {sse[1][:240]}",
                        )
                        break
                    result = v10_as_v03(data["result"]) if t.version == "1.0" else data["result"]
                    if t.task_id is None:
                        t.task_id = result.get("id") if result["kind"] == "task" else result.get("taskId")
                        rec.task_id = t.task_id
                    state = (result.get("status") or {}).get("state")
                    rec.events.append((int(sse[0]), result["kind"], state, bool(result.get("final"))))
                    seen += 1
                    if rec.ended() or (cut_after and seen >= cut_after):
                        break
                self.reqs.append(Req(start, answered, self.now(), t.op, t.version, raw, detail))
                return 0 if raw == "ok" else 0.5
        except httpx.HTTPError as exc:
            kind = "cut" if answered is not None else "conn"
            raw, detail = f"{kind}:{type(exc).__name__}", f"{body['method']} of {t.task_id}: {exc!r}"[:400]
            self.reqs.append(Req(start, answered, self.now(), t.op, t.version, raw, detail))
            return 0.2

    # -- operations --------------------------------------------------------------------------------------

    async def op_blocking(self, version: str, role: str = "default", op: str = "blocking") -> None:
        t = self.track(op, version, role)
        await self.send(t, f"say:{t.marker};sleep:0.3;say:done")

    async def op_worker(self, version: str) -> None:
        await self.op_blocking(version, WORKER_ROLE, "worker")

    async def op_push(self, version: str) -> None:
        t = self.track("push", version)
        t.hook = f"/hook/{t.marker}"
        await self.send(t, f"say:{t.marker};sleep:0.3;say:done", hook=t.hook)

    async def op_stream(self, version: str, role: str = "default", op: str = "stream") -> None:
        t = self.track(op, version, role)
        text = f"say:{t.marker};" + ";".join(["chunks:2", "sleep:0.25"] * 12)
        method = "SendStreamingMessage" if version == "1.0" else "message/stream"
        params = self.send_params(version, text, blocking=True)
        params.pop("configuration")
        await self.follow(t, (method, params, {"Idempotency-Key": str(uuid.uuid4())}))

    async def op_worker_stream(self, version: str) -> None:
        await self.op_stream(version, WORKER_ROLE, "worker_stream")

    async def op_resubscribe(self, version: str) -> None:
        t = self.track("resubscribe", version)
        text = f"say:{t.marker};" + ";".join(["chunks:2", "sleep:0.25"] * 12)
        if await self.send(t, text, blocking=False) is None:
            return
        await self.follow(t, None, cut_after=4)

    async def op_multiturn(self, version: str) -> None:
        t = self.track("multiturn", version)
        task = await self.send(t, f"say:{t.marker};ask:Proceed?;say:after")
        if task is None or state_of(task) != WAITING:
            self.unasked[state_of(task) if task else "no answer"] += 1
            return
        if next(self._turns) % 3 == 2:
            t.parked = True
            self.parked.append((self.now(), t))
            return
        await self.answer(t)

    async def answer(self, t: Tracked) -> None:
        """Answer the task's question (again if a resumed run asks again), until it is no longer waiting."""
        assert t.task_id is not None
        seen: list[str] = []
        for _ in range(3):
            task = await self.send(t, "yes", task_id=t.task_id, expect=(-32004,))
            seen.append("answered " + (state_of(task) if task else "nothing"))
            if task is None:
                task = await self.get(t.op, t.version, t.task_id)
                seen.append("then got " + (state_of(task) if task else "nothing"))
            if task is None or state_of(task) != WAITING:
                return
        self.problems.append(f"{t.marker}: still waiting after three answers: {', '.join(seen)}")

    async def op_answer_parked(self, version: str) -> None:
        """Answer a task parked at least a fault ago; with none, look at a recent task as a client would."""
        if self.parked and self.parked[0][0] < self.now() - self.park_after_s:
            _, t = self.parked.pop(0)
            t.parked = False
            await self.answer(t)
        elif self.tracked and (task_id := self.tracked[-1].task_id):
            await self.get("get", version, task_id, self.tracked[-1].role)

    async def op_cancel(self, version: str) -> None:
        t = self.track("cancel", version)
        task = await self.send(t, f"say:{t.marker};sleep:30;say:never", blocking=False)
        if task is None:
            return
        give_up = time.monotonic() + 15
        while state_of(task) == "submitted" and time.monotonic() < give_up:
            await asyncio.sleep(0.2)
            task = await self.get("cancel", version, t.task_id) or task
        method = "CancelTask" if version == "1.0" else "tasks/cancel"
        await self.rpc("cancel", version, method, {"id": t.task_id}, expect=(-32002,))

    async def loop(self, i: int) -> None:
        for n in itertools.count():
            if self.stopping.is_set():
                return
            op = self.OPS[(i + n) % len(self.OPS)]
            version = ("0.3", "1.0")[(i + n) % 2]
            try:
                await getattr(self, f"op_{op}")(version)
            except Exception as exc:  # a bug of the harness or an answer of a shape it does not expect
                self.problems.append(f"client {i} {op} ({version}): {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    async def console(self) -> None:
        """What the console's pages do: the list's changes every 0.7 s, a task's page, ListTasks."""
        newest = ""
        for n in itertools.count():
            if self.stopping.is_set():
                return
            params = {"limit": "50", **({"changedAfter": newest} if newest else {})}
            resp = await self.request("console", "1.0", "GET", "/console/api/tasks", params=params)
            if resp is not None and resp.status_code == 200:
                for line in resp.json().get("tasks", []):
                    newest = max(newest, line.get("statusAt") or "")
            if n % 2 == 0 and self.tracked and (task_id := self.tracked[-1].task_id):
                await self.request("console", "1.0", "GET", f"/console/api/tasks/{task_id}")
            if n % 3 == 0:
                await self.rpc("list", "1.0", "ListTasks", {"pageSize": 20})
            elif n % 3 == 1:
                await self.request(
                    "list", "1.0", "GET", "/a2a/rest/tasks", params={"pageSize": "20"}, headers=V10
                )
            await asyncio.sleep(0.7)


def _flat(text: str, limit: int = 240) -> str:
    """The start of an answer's body on one line."""
    return " ".join(text.split())[:limit]


async def _events(resp: httpx.Response) -> Any:
    """(id, data) of each SSE event with data (keep-alive comments skipped)."""
    sse_id, data = "", []
    async for line in resp.aiter_lines():
        if not line:
            if data:
                yield sse_id, "\n".join(data)
            sse_id, data = "", []
        elif line.startswith("id:"):
            sse_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


# ---- processes -----------------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def rss_kb(pid: int) -> int | None:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def fd_inodes(pid: int) -> tuple[int, set[int]] | None:
    """How many fds the process has open, and the inodes of its sockets."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes: set[int] = set()
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return len(names), inodes


def tcp_sockets() -> dict[int, tuple[int, int]]:
    """Established TCP sockets on this machine: inode → (local port, remote port)."""
    out: dict[int, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).splitlines()[1:]:
            f = line.split()
            if len(f) > 9 and f[3] == "01":
                out[int(f[9])] = (int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16))
    return out


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _read(f"/proc/{name}/stat")
            if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(name))
    return out


def pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(slots=True)
class Sample:
    t: float
    name: str
    pid: int
    rss_kb: int
    fds: int
    db: int | None
    conns: int = 0
    """Of its fds, the TCP connections that follow the load: from nginx to a replica's port, and its pools'
    to PostgreSQL, to Redis (redis-py's, grown to the most commands at once) and to the webhook receiver
    (the deliverer's keep-alive connections, as many as deliveries were in flight lately)."""


class Sampler:
    """RSS, open fds and database connections of every process, every `every` seconds."""

    def __init__(self, soak: Soak, every: float) -> None:
        self.soak = soak
        self.every = every
        self.samples: list[Sample] = []
        self.started: dict[tuple[str, int], float] = {}
        """When each (name, pid) was first seen."""

    def processes(self) -> dict[str, list[int]]:
        s = self.soak
        procs: dict[str, list[int]] = {
            r.replica_id: [r.pid] for r in s.cluster.replicas if r.alive() and r.pid
        }
        if s.worker.alive() and s.worker.pid:
            procs["worker"] = [s.worker.pid]
        if s.cluster.nginx is not None and s.cluster.nginx.poll() is None:
            procs["nginx"] = [s.cluster.nginx.pid, *children(s.cluster.nginx.pid)]
        redis = pidfile(s.services.redis_dir / "redis.pid")
        if redis:
            procs["redis"] = [redis]
        pg = pidfile(s.services.pg_data / "postmaster.pid")
        if pg:
            procs["postgres"] = [pg]
        procs["harness"] = [os.getpid()]
        return procs

    async def client_ports(self) -> tuple[set[int], int] | None:
        """The client ports of PostgreSQL's client backends, and their number (None: it does not answer)."""
        try:
            conn = await asyncpg.connect(self.soak.dsn, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return None
        try:
            rows = await conn.fetch(
                "SELECT client_port FROM pg_stat_activity WHERE backend_type = 'client backend'", timeout=2
            )
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return None
        finally:
            with contextlib.suppress(Exception):
                await conn.close()
        return {r["client_port"] for r in rows if r["client_port"]}, len(rows)

    async def sample(self) -> None:
        t = self.soak.now()
        ports = await self.client_ports()
        sockets = tcp_sockets()
        pg_port = self.soak.services.pg_port
        pools = {pg_port, self.soak.services.redis_port, self.soak.receiver.port}
        listening = {r.replica_id: r.port for r in self.soak.cluster.replicas}
        for name, pids in self.processes().items():
            rss = fds = conns = 0
            db: int | None = 0
            alive = False
            for pid in pids:
                r, f = rss_kb(pid), fd_inodes(pid)
                if r is None or f is None:
                    continue
                alive = True
                rss += r
                fds += f[0]
                mine = [sockets[i] for i in f[1] if i in sockets]
                to_pg = {local for local, remote in mine if remote == pg_port}
                conns += sum(remote in pools or local == listening.get(name) for local, remote in mine)
                if ports is None:
                    db = None
                elif db is not None:
                    db += len(to_pg & ports[0])
            if name == "postgres":
                db = ports[1] if ports else None
            if alive:
                self.started.setdefault((name, pids[0]), t)
                self.samples.append(Sample(t, name, pids[0], rss, fds, db, conns))

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.sample()
            await asyncio.sleep(max(0.1, self.every - (time.monotonic() - started)))


# ---- the run -------------------------------------------------------------------------------------------


class Soak:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.services = OwnServices()
        self.dsn = self.services.pg_url.replace("postgresql+asyncpg://", "postgresql://")
        self.receiver = Receiver()
        workdir = cfg.workdir
        self.cluster = Cluster(
            self.services.pg_url,
            self.services.redis_url,
            workdir / "cluster",
            3,
            **cluster_env(cfg.worker_key),
        )
        self.worker = WorkerProcess(
            self.cluster.nginx_url,
            workdir / "worker.log",
            "soak",
            key=cfg.worker_key,
            agents={WORKER_ROLE: AGENTS[WORKER_ROLE]},
            role=WORKER_ROLE,
        )
        self.t0 = time.monotonic()
        self.faults: list[FaultRecord] = []
        self.kills = 0
        self.load: Load | None = None
        self.sampler = Sampler(self, cfg.sample_s)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        print(f"soak {self.now():7.1f}s  {text}", flush=True)

    # -- set-up --------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.say(
            "starting a PostgreSQL and a Redis of its own, 3 replicas behind nginx, a worker;"
            f" in {self.cfg.workdir}"
        )
        await asyncio.to_thread(self.services.start)
        await asyncio.to_thread(self.cluster.start)
        self.worker.start()
        await self.until_worker_serves(0)
        self.say("ready: every replica answers /readyz, GET /agents lists the worker")

    async def until_worker_serves(self, lives: int) -> None:
        """The worker's next life has reached the server and serves its role, and discovery lists it."""
        deadline = time.monotonic() + READY_S
        while self.worker.started() <= lives:
            if not self.worker.alive() or time.monotonic() > deadline:
                why = "exited" if not self.worker.alive() else "timed out"
                raise RuntimeError(
                    f"the worker did not start serving ({why}); "
                    f"{self.worker.log_path}:\n{log_tail(self.worker.log_path, 30)}"
                )
            await asyncio.sleep(0.2)
        try:
            await until_listed(self.cluster.nginx_url, WORKER_ROLE, True, within=READY_S)
        except TimeoutError:
            raise RuntimeError(
                f"the worker was never listed in GET /agents; {self.worker.log_path}:\n"
                f"{log_tail(self.worker.log_path, 30)}"
            ) from None

    async def stop(self) -> None:
        if self.load is not None:
            await self.load.http.aclose()
        self.worker.stop()
        await asyncio.to_thread(self.cluster.stop)
        await asyncio.to_thread(self.services.stop)
        self.receiver.close()

    # -- faults --------------------------------------------------------------------------------------

    async def fault(self, name: str) -> str:
        """Apply one fault and wait for its recovery; what was done."""
        cl, services = self.cluster, self.services
        if name == "replica-kill":
            i = self.kills % len(cl.replicas)
            self.kills += 1
            await asyncio.to_thread(cl.kill, i)
            await asyncio.to_thread(cl.spawn, i)
            await asyncio.to_thread(cl.wait_ready, i, READY_S)
            return f"{cl.replicas[i].replica_id} killed and restarted"
        if name == "redis-restart":
            await asyncio.to_thread(services.restart_redis)
        elif name == "pg-restart":
            await asyncio.to_thread(services.stop_pg)
            await asyncio.to_thread(services.start_pg)
        elif name == "pg-down":
            await asyncio.to_thread(services.stop_pg)
            await asyncio.sleep(self.cfg.pg_down_s)  # the fault itself: how long PostgreSQL stays away
            await asyncio.to_thread(services.start_pg)
        elif name == "worker-kill":
            lives = self.worker.started()
            self.worker.kill()
            self.worker.start()
            await self.until_worker_serves(lives)
            return "worker killed and restarted"
        elif name == "nginx-reload":
            assert cl.nginx is not None
            old = set(children(cl.nginx.pid))
            await asyncio.to_thread(cl.route, None, READY_S)  # SIGHUP; nginx answers from every replica
            deadline = time.monotonic() + READY_S
            while not (new := set(children(cl.nginx.pid)) - old):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nginx started no new worker after SIGHUP; {cl.nginx_dir}/error.log")
                await asyncio.sleep(0.05)
            return f"nginx reloaded (SIGHUP): new worker pid {min(new)}"
        else:
            raise ValueError(f"unknown fault {name!r}")
        await asyncio.to_thread(cl.wait_all_ready, READY_S)
        return {
            "redis-restart": "Redis restarted (empty)",
            "pg-restart": "PostgreSQL restarted",
            "pg-down": f"PostgreSQL down {self.cfg.pg_down_s:g} s",
        }[name]

    async def faults_in_turn(self) -> None:
        every = self.cfg.fault_every_s
        for w in range(self.cfg.windows):
            await asyncio.sleep(max(0.0, w * every + every / 2 - self.now()))
            name = self.cfg.faults[w % len(self.cfg.faults)]
            start = self.now()
            self.say(f"window {w + 1}: {name}")
            detail = await self.fault(name)
            self.faults.append(FaultRecord(name, w, start, self.now(), detail))
            self.say(f"window {w + 1}: {detail}, recovered in {self.now() - start:.1f} s")

    # -- the whole run -------------------------------------------------------------------------------

    async def run(self) -> Report:
        cfg = self.cfg
        await self.start()
        self.t0 = time.monotonic()
        load = self.load = Load(self.cluster.nginx_url, self.receiver.url, self.t0, cfg.fault_every_s)
        self.say(
            f"load: {cfg.clients} clients and the console's poller for {cfg.duration_s:g} s, a fault every"
            f" {cfg.fault_every_s:g} s"
        )
        sampler = asyncio.create_task(self.sampler.run(), name="sampler")
        clients = [asyncio.create_task(load.loop(i), name=f"client-{i}") for i in range(cfg.clients)]
        clients.append(asyncio.create_task(load.console(), name="console"))
        faults = asyncio.create_task(self.faults_in_turn(), name="faults")
        try:
            await asyncio.wait_for(asyncio.shield(faults), cfg.duration_s + READY_S * 3)
            await asyncio.sleep(max(0.0, cfg.duration_s - self.now()))
            end = self.now()
            self.say("load stops; waiting for the operations under way, then for every task to end")
            load.stopping.set()
            _, pending = await asyncio.wait(clients, timeout=cfg.drain_s)
            for c in pending:
                c.cancel()
            for c in clients:
                if c.done() and not c.cancelled() and c.exception() is not None:
                    load.problems.append(f"{c.get_name()}: {c.exception()!r}")
            if pending:
                load.problems.append(
                    f"{len(pending)} client(s) still busy {cfg.drain_s:g} s after the load stopped"
                )
            checks = await Checks(self, end).run()
        finally:
            faults.cancel()
            sampler.cancel()
            for c in clients:
                c.cancel()
            await asyncio.gather(faults, sampler, *clients, return_exceptions=True)
        return build_report(self, end, checks)


# ---- the end -------------------------------------------------------------------------------------------


@dataclass
class Figures:
    tasks: int = 0
    states: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    doubled: int = 0
    runs_doubled: int = 0
    stuck: int = 0
    streams: int = 0
    stream_reconnects: int = 0
    events_missing: int = 0
    events_out_of_order: int = 0
    streams_unfinished: int = 0
    resumes_refused: int = 0
    webhooks: int = 0
    webhooks_missing: int = 0
    gave_up: int = 0
    replicas_exited: int = 0
    unasked: dict[str, int] = field(default_factory=dict)


class Checks:
    """Once the load has stopped: every task ended, then lost, doubled, stuck, streams and webhooks."""

    def __init__(self, soak: Soak, end: float) -> None:
        self.soak = soak
        self.end = end
        self.figures = Figures()
        self.problems: list[str] = []

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.soak.dsn, timeout=30)
        try:
            return await conn.fetch(sql, *args, timeout=120)
        finally:
            await conn.close()

    def waiting_on_purpose(self) -> set[str]:
        load = self.soak.load
        assert load is not None
        return {t.task_id for t in load.tracked if t.parked and t.task_id}

    async def until_ended(self) -> list[asyncpg.Record]:
        """Wait until no task is left unended (but those waiting for an answer on purpose); the tasks."""
        deadline = time.monotonic() + self.soak.cfg.drain_s
        while True:
            rows = await self.fetch("SELECT id, title, role, state, last_seq, lease_owner FROM tasks")
            waiting = self.waiting_on_purpose()
            open_ = [r for r in rows if r["state"] not in ENDED and r["id"] not in waiting]
            if not open_ or time.monotonic() > deadline:
                return rows
            await asyncio.sleep(1)

    def notified(self) -> dict[str, set[str]]:
        """The states each webhook path was told of so far."""
        out: dict[str, set[str]] = defaultdict(set)
        for call in list(self.soak.receiver.calls):
            body = call.body or {}
            body = body.get("statusUpdate", body)
            if (body.get("status") or {}).get("state"):
                out[call.path].add(state_of(body))
        return out

    async def until_delivered(self, expected: dict[str, tuple[str, str]]) -> dict[str, set[str]]:
        """Wait until each webhook got its task's final state (or the drain's deadline); what each got."""
        deadline = time.monotonic() + self.soak.cfg.drain_s
        while True:
            got = self.notified()
            if all(state in got[path] for path, state in expected.values()) or time.monotonic() > deadline:
                return got
            await asyncio.sleep(0.5)

    def log_lines(self, task_id: str, limit: int = 8) -> str:
        cl = self.soak.cluster
        lines = [
            f"    {r.replica_id}: {line}"
            for r in cl.replicas
            for line in cl.log(r.index).splitlines()
            if task_id in line
        ]
        lines += [f"    worker: {line}" for line in self.soak.worker.log().splitlines() if task_id in line]
        return "\n".join(lines[:limit])

    async def run(self) -> Checks:
        soak, f = self.soak, self.figures
        load = soak.load
        assert load is not None
        rows = await self.until_ended()
        by_id = {r["id"]: r for r in rows}
        by_marker: dict[str, list[asyncpg.Record]] = defaultdict(list)
        for r in rows:
            m = MARKER.search(r["title"] or "")
            if m:
                by_marker[m.group(0)].append(r)
        f.tasks = len(rows)
        f.states = dict(Counter(r["state"] for r in rows))
        f.gave_up = sum(t.gave_up for t in load.tracked)
        f.unasked = dict(load.unasked)
        waiting = self.waiting_on_purpose()
        for t in load.tracked:
            stored = by_marker.get(t.marker, [])
            if t.task_id is not None and t.task_id not in by_id:
                f.lost += 1
                self.problems.append(
                    f"lost: {t.marker} ({t.version} {t.op}) acknowledged as {t.task_id}, not stored"
                )
            if len(stored) > 1:
                f.doubled += len(stored) - 1
                ids = ", ".join(r["id"] for r in stored)
                self.problems.append(f"doubled: {t.marker} ({t.version} {t.op}) stored as {ids}")
        stuck = [
            r for r in rows if r["state"] not in ENDED and not (r["id"] in waiting and r["state"] == WAITING)
        ]
        f.stuck = len(stuck)
        for task_id in waiting:
            if task_id in by_id and by_id[task_id]["state"] != WAITING:
                self.problems.append(
                    f"task {task_id} left waiting for its answer is {by_id[task_id]['state']}"
                )
        events = await self.fetch(
            "SELECT task_id, seq, kind, body->'status'->>'state' AS state,"
            " coalesce((body->'metadata') ? 'session', false) AS run_start,"
            " coalesce((body->>'final')::boolean, false) AS final"
            " FROM events ORDER BY task_id, seq"
        )
        log: dict[str, list[asyncpg.Record]] = defaultdict(list)
        for e in events:
            log[e["task_id"]].append(e)
        for r in stuck:
            trail = _trail(log.get(r["id"], []))
            self.problems.append(
                f"stuck: task {r['id']} ({(r['title'] or '')[:40]!r}) is {r['state']},"
                f" lease {r['lease_owner']}; events {trail}\n" + self.log_lines(r["id"])
            )
        for task_id, evs in log.items():
            seqs = [e["seq"] for e in evs]
            if seqs != list(range(1, len(seqs) + 1)):
                self.problems.append(f"the event log of {task_id} has holes: {seqs[:50]}")
            runs = 0
            for e in evs:
                if e["kind"] == "status" and e["state"] == WAITING:
                    runs = 0
                elif e["run_start"]:
                    runs += 1
                    if runs == 2:
                        f.runs_doubled += 1
                        self.problems.append(
                            f"run twice: task {task_id} started a run again at seq {e['seq']}\n"
                            + self.log_lines(task_id)
                        )
        self.check_streams(load.streams, log)
        hooks = {
            t.task_id: (t.hook, by_id[t.task_id]["state"])
            for t in load.tracked
            if t.hook and t.task_id and t.task_id in by_id
        }
        f.webhooks = len(hooks)
        got = await self.until_delivered(hooks)
        for task_id, (path, state) in hooks.items():
            if state not in got[path]:
                f.webhooks_missing += 1
                self.problems.append(
                    f"webhook of {task_id} never got its final state {state}: it got {sorted(got[path])}"
                )
        for r in soak.cluster.replicas:
            if not r.alive():
                f.replicas_exited += 1
                self.problems.append(
                    f"replica {r.replica_id} is not running; {r.log_path}:\n{log_tail(r.log_path)}"
                )
            if "Task exception was never retrieved" in soak.cluster.log(r.index):
                self.problems.append(f"'Task exception was never retrieved' in {r.log_path}")
        if not soak.worker.alive():
            self.problems.append(
                f"the worker is not running; {soak.worker.log_path}:\n{log_tail(soak.worker.log_path)}"
            )
        self.problems.extend(load.problems)
        return self

    def check_streams(self, streams: list[StreamRecord], log: dict[str, list[asyncpg.Record]]) -> None:
        """Each stream's events are the task's event log, in order, with no gap or repeat, from its first
        event (a send's or a subscription's snapshot) to the event that ended it."""
        f = self.figures
        for s in streams:
            f.streams += 1
            f.stream_reconnects += max(0, s.connections - 1)
            if s.refused:
                f.resumes_refused += 1
            if not s.events:
                stored_end = log.get(s.task_id or "", [])[-1:]
                if s.refused and stored_end and (stored_end[0]["final"] or stored_end[0]["state"] in ENDED):
                    continue  # its task ended (a fault failed it) before it was subscribed to
                if s.task_id:
                    f.streams_unfinished += 1
                    trail = _trail(log.get(s.task_id, []))
                    self.problems.append(
                        f"stream of {s.task_id} ({s.marker}, {s.version} {s.op}) saw no event"
                        f"{' (its resume refused)' if s.refused else ''}; stored events {trail or 'none'}"
                    )
                continue
            seqs = [e[0] for e in s.events]
            gaps = [(a, b) for a, b in itertools.pairwise(seqs) if b > a + 1]
            back = [(a, b) for a, b in itertools.pairwise(seqs) if b <= a]
            f.events_missing += sum(b - a - 1 for a, b in gaps)
            f.events_out_of_order += len(back)
            stored = {e["seq"]: e for e in log.get(s.task_id or "", [])}
            ghosts = [q for q in seqs if q not in stored]
            if gaps or back or ghosts:
                self.problems.append(
                    f"stream of {s.task_id} ({s.marker}, {s.version} {s.op}): gaps {gaps[:5]}, out of order"
                    f" {back[:5]}, not in the log {ghosts[:5]}; seqs {seqs[:60]}"
                )
            if not s.done and not s.refused:
                f.streams_unfinished += 1
                self.problems.append(
                    f"stream of {s.task_id} ({s.marker}, {s.version} {s.op}) never saw its end"
                )
            elif s.done and seqs[-1] in stored:
                last = stored[seqs[-1]]
                if s.events[-1][1] != "task" and not (last["final"] or last["state"] in ENDED):
                    self.problems.append(f"stream of {s.task_id} ended on seq {seqs[-1]}, not a final event")


def _trail(events: list[asyncpg.Record]) -> str:
    """A task's stored events, short: `1:submitted 2:working 3:completed`."""
    return " ".join(f"{e['seq']}:{e['state'] or e['kind']}" for e in events)


# ---- the report ----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def classify(req: Req, faults: list[FaultRecord]) -> tuple[str, bool]:
    """The kind of an answer and whether it is a failure."""
    if req.raw == "ok":
        return "ok", False
    during = {f.name for f in faults if req.start <= f.end + EXCUSE_GRACE_S and req.end >= f.start}
    if req.raw == "http:503+ra" and during & OUTAGES:
        return "503 outage", False
    if req.raw.startswith("http:502") and "replica-kill" in during:
        return "502 replica gone", False
    if req.raw.startswith(("conn:", "cut:")) and during & CUTS:
        return req.raw, False
    return req.raw, True


@dataclass
class Target:
    name: str
    value: str
    met: bool | None
    """None: not judged (no baseline in the run)."""


@dataclass
class Report:
    windows: list[dict[str, Any]]
    figures: dict[str, Any]
    targets: list[Target]
    problems: list[str]
    text: str = ""
    duration_s: float = 0.0
    samples: list[tuple[float, str, int, int, int, int | None, int]] = field(default_factory=list)
    """Every process sample: (t, name, pid, RSS kB, fds, database connections, `Sample.conns`)."""

    def all_met(self) -> bool:
        return all(t.met is not False for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "figures": self.figures,
            "targets": [asdict(t) for t in self.targets],
            "all_met": self.all_met(),
            "problems": self.problems,
            "duration_s": self.duration_s,
            "samples": self.samples,
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def stability(soak: Soak, end: float) -> tuple[list[Target], dict[str, Any]]:
    """RSS and fds of each replica process over the last window of its life against the window that ends
    `baseline_s` after it started (the load's start for the first processes), medians of the samples
    taken outside the faults (a fault and `SETTLE_S` after its recovery: PostgreSQL away closes every
    database connection): within `tolerance`. The fds are compared at the baseline's count of the
    connections that come and go with the load (`Sample.conns`: nginx's to the replica, as many as its
    keep-alive pool holds at the moment, and the pools' to PostgreSQL, Redis and the webhook receiver, as
    many as they have grown to): the end's fds less its connections, plus the baseline's connections. A
    process that did not live a window past its baseline is not judged."""
    cfg = soak.cfg
    every = cfg.fault_every_s
    calm = [(f.start, f.end + SETTLE_S) for f in soak.faults]
    samples: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in soak.sampler.samples:
        if not any(lo <= s.t <= hi for lo, hi in calm):
            samples[(s.name, s.pid)].append(s)
    targets: list[Target] = []
    detail: dict[str, Any] = {}
    replica_ids = [r.replica_id for r in soak.cluster.replicas]
    for (name, pid), ss in sorted(samples.items(), key=lambda kv: (kv[0][0], soak.sampler.started[kv[0]])):
        if name not in replica_ids:
            continue
        born = soak.sampler.started[(name, pid)]
        mark = (0.0 if born < 2 * cfg.sample_s else born) + cfg.baseline_s
        last = min(ss[-1].t, end)
        base = [s for s in ss if mark - every <= s.t <= mark]
        tail = [s for s in ss if last - every <= s.t <= last]
        label = f"{name} (pid {pid})"
        if not base or last - mark < every / 2:
            targets.append(Target(f"RSS and fds of {label} within {cfg.tolerance:.0%}", "not judged", None))
            continue

        median = statistics.median
        rss = median([s.rss_kb / 1024 for s in base]), median([s.rss_kb / 1024 for s in tail])
        fds = median([s.fds for s in base]), median([s.fds for s in tail])
        conns = median([s.conns for s in base]), median([s.conns for s in tail])
        same = median([s.fds - s.conns for s in tail]) + conns[0]
        rss_change = (rss[1] - rss[0]) / rss[0]
        fds_change = (same - fds[0]) / fds[0] if fds[0] else 0.0
        at = f"within {cfg.tolerance:.0%} of t={mark:.0f}s"
        targets.append(
            Target(
                f"RSS of {label} {at}",
                f"{rss[0]:.1f} MB -> {rss[1]:.1f} MB ({rss_change:+.1%})",
                abs(rss_change) <= cfg.tolerance,
            )
        )
        targets.append(
            Target(
                f"fds of {label} {at}",
                f"{fds[0]:.1f} -> {same:.1f} ({fds_change:+.1%}) at {conns[0]:.0f} connections"
                f" (all fds {fds[1]:.1f}, {conns[1]:.0f} connections)",
                abs(fds_change) <= cfg.tolerance,
            )
        )
        detail[label] = {
            "at": mark,
            "rss_mb": rss,
            "rss_change": rss_change,
            "fds": fds,
            "connections": conns,
            "fds_at_baseline_connections": same,
            "fds_change": fds_change,
        }
    return targets, detail


def build_report(soak: Soak, end: float, checks: Checks) -> Report:
    cfg = soak.cfg
    load = soak.load
    assert load is not None
    every = cfg.fault_every_s
    windows: list[dict[str, Any]] = []
    failed_total = 0
    failures: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    names = [r.replica_id for r in soak.cluster.replicas] + [
        "worker",
        "nginx",
        "redis",
        "postgres",
        "harness",
    ]
    for w in range(cfg.windows):
        lo, hi = w * every, min((w + 1) * every, end)
        reqs = [r for r in load.reqs if lo <= r.start < hi or (w == cfg.windows - 1 and r.start >= hi)]
        kinds: Counter[str] = Counter()
        failed = 0
        for r in reqs:
            kind, bad = classify(r, soak.faults)
            if kind != "ok":
                kinds[kind + (" (failure)" if bad else "")] += 1
            if bad:
                failed += 1
                failures[f"{r.op} {r.version}: {kind}"] += 1
                if len(examples[kind]) < 3:
                    examples[kind].append(
                        f"failed request at t={r.start:.1f}s ({r.op} {r.version}): {r.detail}"
                    )
        failed_total += failed
        latencies = [(r.answered - r.start) * 1000 for r in reqs if r.answered is not None]
        procs: dict[str, dict[str, float | None]] = {}
        for name in names:
            ss = [s for s in soak.sampler.samples if s.name == name and lo <= s.t < hi]
            if ss:
                dbs = [s.db for s in ss if s.db is not None]
                procs[name] = {
                    "rss_mb": _median([s.rss_kb / 1024 for s in ss]),
                    "fds": _median([s.fds for s in ss]),
                    "db": _median(dbs) if dbs else None,
                }
        fault = next((f for f in soak.faults if f.window == w), None)
        windows.append(
            {
                "window": w + 1,
                "from_s": lo,
                "to_s": hi,
                "fault": fault.name if fault else None,
                "fault_detail": fault.detail if fault else None,
                "fault_at_s": fault.start if fault else None,
                "recovered_s": (fault.end - fault.start) if fault else None,
                "requests": len(reqs),
                "errors": dict(kinds),
                "failures": failed,
                "p50_ms": percentile(latencies, 0.5),
                "p99_ms": percentile(latencies, 0.99),
                "processes": procs,
            }
        )
    f = checks.figures
    stable, stable_detail = stability(soak, end)
    targets = [
        Target("tasks lost", str(f.lost), f.lost == 0),
        Target(
            "tasks doubled (two tasks of one send, or a turn run twice)",
            str(f.doubled + f.runs_doubled),
            f.doubled + f.runs_doubled == 0,
        ),
        Target("tasks stuck (not ended)", str(f.stuck), f.stuck == 0),
        Target(
            "events missing or out of order on any stream",
            f"{f.events_missing} missing, {f.events_out_of_order} out of order,"
            f" {f.streams_unfinished} unfinished",
            f.events_missing + f.events_out_of_order + f.streams_unfinished == 0,
        ),
        Target("webhooks never delivered", f"{f.webhooks_missing} of {f.webhooks}", f.webhooks_missing == 0),
        Target(
            "requests failed (5xx outside outages, unexpected errors)", str(failed_total), failed_total == 0
        ),
        *stable,
    ]
    figures = {
        **asdict(f),
        "failures": dict(failures),
        "stability": stable_detail,
        "faults": [asdict(x) for x in soak.faults],
    }
    problems = [e for kind in sorted(examples) for e in examples[kind]] + checks.problems
    report = Report(windows, figures, targets, problems)
    report.samples = [
        (round(x.t, 1), x.name, x.pid, x.rss_kb, x.fds, x.db, x.conns) for x in soak.sampler.samples
    ]
    report.text = render(report, names)
    return report


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def render(report: Report, names: list[str]) -> str:
    out: list[str] = []
    head = (
        f"{'win':>3} {'from':>6} {'fault':<14} {'recov':>6} {'reqs':>6} {'fail':>5} {'p50ms':>6} {'p99ms':>7}"
        "  errors by kind"
    )
    out += ["", "soak: per window", head, "-" * len(head)]
    for w in report.windows:
        errors = ", ".join(f"{k} {n}" for k, n in sorted(w["errors"].items())) or "-"
        out.append(
            f"{w['window']:>3} {w['from_s']:>5.0f}s {w['fault'] or '-':<14}"
            f" {_fmt(w['recovered_s'], '.1f'):>5}s"
            f" {w['requests']:>6} {w['failures']:>5} {_fmt(w['p50_ms']):>6} {_fmt(w['p99_ms']):>7}  {errors}"
        )
    out += ["", "soak: processes per window, medians: RSS MB / open fds / database connections"]
    head = f"{'win':>3} " + " ".join(f"{n:>16}" for n in names)
    out += [head, "-" * len(head)]
    for w in report.windows:
        cells = []
        for n in names:
            p = w["processes"].get(n)
            cells.append(f"{_fmt(p['rss_mb'])}/{_fmt(p['fds'])}/{_fmt(p['db'])}" if p else "-")
        out.append(f"{w['window']:>3} " + " ".join(f"{c:>16}" for c in cells))
    f = report.figures
    unasked = ", ".join(f"{k} {v}" for k, v in sorted(f.get("unasked", {}).items())) or "none"
    out += [
        "",
        f"soak: {f['tasks']} tasks ({', '.join(f'{k} {v}' for k, v in sorted(f['states'].items()))});"
        f" {f['streams']} streams ({f['stream_reconnects']} reconnects, {f['resumes_refused']} v1.0 resumes"
        " refused: task ended);"
        f" {f['webhooks']} webhooks; {f['gave_up']} operations gave up; multi-turn tasks not asking at"
        f" their first answer: {unasked}",
        "",
        "soak: targets",
    ]
    width = max(len(t.name) for t in report.targets)
    for t in report.targets:
        verdict = {True: "MET", False: "NOT MET", None: "not judged"}[t.met]
        out.append(f"  {t.name:<{width}}  {t.value:<34} {verdict}")
    if report.problems:
        out += ["", f"soak: {len(report.problems)} problem(s) (first 40):"]
        out += [f"  {p}" for p in report.problems[:40]]
    out.append("")
    out.append(f"soak: {'every target MET' if report.all_met() else 'NOT MET: see above'}")
    return "\n".join(out)


async def run(cfg: Config) -> Report:
    """The whole soak: set-up, load and faults, the end's checks; the report (printed and in report.json)."""
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    soak = Soak(cfg)
    try:
        report = await soak.run()
    finally:
        await soak.stop()
    report.duration_s = time.monotonic() - started
    print(report.text, flush=True)
    print(f"soak: {report.duration_s:.0f} s in all; report and logs in {cfg.workdir}", flush=True)
    (cfg.workdir / "report.json").write_text(json.dumps(report.to_json(), indent=2, default=str))
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    p.add_argument("--duration-min", type=float, default=60.0, help="how long the load runs (60)")
    p.add_argument("--fault-every-s", type=float, default=300.0, help="a fault and a window every ... (300)")
    p.add_argument("--pg-down-s", type=float, default=30.0, help="how long PostgreSQL stays down (30)")
    p.add_argument(
        "--baseline-min", type=float, default=10.0, help="RSS and fds are compared with their value then (10)"
    )
    p.add_argument("--clients", type=int, default=6, help="client loops beside the console's poller (6)")
    p.add_argument("--sample-s", type=float, default=5.0, help="how often processes are sampled (5)")
    p.add_argument(
        "--workdir", type=Path, default=Path("/tmp/a2a-soak"), help="logs and report.json (emptied)"
    )
    p.add_argument("--faults", default=",".join(FAULTS), help="the faults, in turn (all six)")
    args = p.parse_args(argv)
    faults = tuple(x.strip() for x in args.faults.split(",") if x.strip())
    unknown = set(faults) - set(FAULTS)
    if unknown or not faults:
        p.error(f"--faults: unknown {sorted(unknown)}; choose among {', '.join(FAULTS)}")
    if args.workdir.is_dir() and any(args.workdir.iterdir()):
        if not (args.workdir / "cluster").exists() and not (args.workdir / "report.json").exists():
            p.error(f"--workdir {args.workdir} is not a soak's folder; not emptying it")
        shutil.rmtree(args.workdir)
    cfg = Config(
        duration_s=args.duration_min * 60,
        fault_every_s=args.fault_every_s,
        pg_down_s=args.pg_down_s,
        baseline_s=args.baseline_min * 60,
        clients=args.clients,
        sample_s=args.sample_s,
        workdir=args.workdir,
        faults=faults,
    )
    report = asyncio.run(run(cfg))
    sys.exit(0 if report.all_met() else 1)


if __name__ == "__main__":
    main()
