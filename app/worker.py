"""A remote worker: `a2a-server worker --server URL --role ROLE` runs one role's agents on this machine and
connects out to the server over HTTP(S) (through the same load balancer as every client), holding a worker
credential only (`A2A_WORKER_KEY`, or a JWT with the worker scope in `A2A_WORKER_TOKEN`), no database or
Redis credential.

It is the replica's `Runner`, jailed agents and all, over two small stand-ins for what a replica reads from
the database: `RemoteLeases` (claims, lease renewals, a lease read) and `RemoteTasks` (its runs' tasks, whose
events it numbers itself with the same `tasks.live.step` and hands to the server in order, retried until
acknowledged: idempotent by event number, so a replica restarting under it loses and doubles nothing). A
third loop (`Worker._news`) long-polls the server for what others did to its tasks: an answer to a waiting
task goes to its run, a cancel or a lease taken stops it. The protocol is in `app/api/workers.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Collection
from typing import Any

import httpx

from app import roles as roles_
from app.agents.sdk import Agent
from app.protocol.model import INTERRUPTED_STATES, Message, Role, TaskState, status_update
from app.runner.prices import PriceTable
from app.runner.runner import Runner
from app.settings import Settings
from app.store.leases import Held
from app.store.outage import backoff
from app.tasks.live import LiveTask, TaskLostError, UnrecordedError, step
from app.tasks.workers import events_to_wire, task_from_wire
from app.telemetry import logs, traces

log = logging.getLogger("app.worker")

CLAIM_WAIT_S = 20.0
"""How long one claim waits at the server for work (a long poll)."""


class ServerError(Exception):
    """The server refused the worker (credential, role): retrying cannot help."""


class Server:
    """The worker endpoints of one server, retried across connection failures and 5xx (a replica restarting
    behind the load balancer) with backoff."""

    def __init__(self, url: str, headers: dict[str, str], role: str, instance: str) -> None:
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"), headers=headers, timeout=httpx.Timeout(10, read=45)
        )
        self.ask = {"role": role, "instance": instance}
        self.load: Callable[[], dict[str, int]] = dict
        """The worker's slots and running agents, sent with claims and syncs for discovery."""

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, give_up_s: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The answer's status and JSON; retried while the server cannot answer, for up to `give_up_s`
        (then TimeoutError; None: for good)."""
        loop = asyncio.get_running_loop()
        deadline = None if give_up_s is None else loop.time() + give_up_s
        delay = 0.1
        while True:
            try:
                if method == "GET":
                    resp = await self._http.get(path, params=self.ask)
                else:
                    resp = await self._http.post(path, json={**self.ask, **self.load(), **(body or {})})
                if resp.status_code < 500:
                    if resp.status_code in (401, 403):
                        raise ServerError(f"the server refused the worker credential: {resp.text}")
                    return resp.status_code, resp.json()
                why = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}"
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(why)
            log.debug("worker call %s %s failed (%s); retrying", method, path, why)
            await asyncio.sleep(delay)
            delay = backoff(delay)


class RemoteTasks:
    """The runs' tasks, as the `Runner` reads and changes them (`LiveTasks`' runner side)."""

    def __init__(self, server: Server, holder: str, outage_grace_s: float) -> None:
        self._server = server
        self.replica_id = holder
        self.outage_grace_s = outage_grace_s
        self._live: dict[str, LiveTask] = {}
        self.claimed: dict[str, LiveTask] = {}
        """Tasks claimed and not yet adopted by a run."""

    def get(self, task_id: str) -> LiveTask | None:
        return self._live.get(task_id)

    @property
    def held(self) -> dict[str, dict[str, Any]]:
        """Each run's task as the server's sync takes it: last event number, last user message id."""
        return {task_id: _known(live) for task_id, live in self._live.items()}

    async def adopt(self, task_id: str) -> bool:
        live = self.claimed.pop(task_id, None)
        if live is None:
            return task_id in self._live
        self._live[task_id] = live
        return True

    async def record(self, task_id: str, events: list[Any]) -> bool:
        """Hand the run's events to the server, in order; True once the task has ended."""
        live = self._live.get(task_id)
        if live is None:
            raise TaskLostError(task_id)
        async with live.lock:
            if live.task.status.state.terminal:
                return True
            s = step(live.task, live.seq, events)
            body = {"after": live.seq, "events": events_to_wire(events)}
            try:
                status, _ = await self._server.call(
                    "POST", f"/workers/v1/tasks/{task_id}/events", body, give_up_s=self.outage_grace_s
                )
            except TimeoutError as exc:
                raise UnrecordedError(task_id) from exc
            if status == 409:
                self.lose(task_id)
                raise TaskLostError(task_id)
            if status != 200:
                raise RuntimeError(f"the server refused the events of task {task_id} (HTTP {status})")
            s.apply_to(live.task, events)
            live.seq = s.seq
            if s.status.state.terminal:
                self._live.pop(task_id, None)
            return s.status.state.terminal

    async def fail(self, task_id: str, reason: str, wait: bool = False) -> None:
        live = self._live.get(task_id)
        if live is not None:
            await self.record(
                task_id, [status_update(task_id, live.task.context_id, TaskState.FAILED, reason)]
            )

    def forget(self, task_id: str) -> None:
        live = self._live.get(task_id)
        if live is not None and not live.task.status.state.terminal:
            self._live.pop(task_id, None)

    def lose(self, task_id: str) -> bool:
        return self._live.pop(task_id, None) is not None

    async def webhooked(self, task_ids: list[str]) -> set[str]:
        """None to look up: the replicas that write a worker's events read the tasks' webhooks as they do."""
        return set()

    def resync(self, task_id: str) -> None:
        """Nobody follows a task at a worker: its clients follow it at the replicas."""
        return None

    async def release(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            self._live.pop(task_id, None)
        if task_ids:
            await self._server.call("POST", "/workers/v1/release", {"tasks": task_ids}, give_up_s=5)

    async def end_lost(self, held: Held, reason: str, *, restarted: bool = False) -> bool:
        return False  # a worker reaps nothing: the server's replicas do


class RemoteLeases:
    """The worker's leases, as the `Runner` claims and renews them (`Leases`' runner side)."""

    def __init__(self, server: Server, tasks: RemoteTasks) -> None:
        self._server = server
        self._tasks = tasks
        self.replica_id = tasks.replica_id
        self.claim_wait_s = CLAIM_WAIT_S
        """How long a claim waits at the server: at most the discovery heartbeat, so an idle worker's calls
        keep it listed."""

    async def claim_queued(self, limit: int) -> list[str]:
        ask = {"limit": limit, "waitS": self.claim_wait_s}
        status, body = await self._server.call("POST", "/workers/v1/claim", ask)
        if status != 200:
            raise RuntimeError(f"claim refused (HTTP {status}): {body}")
        ids = []
        for item in body["tasks"]:
            task = task_from_wire(item["task"])
            self._tasks.claimed[task.id] = LiveTask(
                task, item["owner"], item["lastSeq"], traceparent=item.get("traceparent")
            )
            ids.append(task.id)
        return ids

    async def renew(self, task_ids: Collection[str]) -> set[str]:
        if not task_ids:
            return set()
        held = {t: _known(live) if (live := self._tasks.get(t)) else {"seq": 0} for t in task_ids}
        _status, body = await self._server.call("POST", "/workers/v1/sync", {"tasks": held}, give_up_s=10)
        lost = {t for t, item in body.get("news", {}).items() if item.get("lost")}
        return set(task_ids) - lost

    async def recorded(self, task_id: str) -> tuple[int, str | None] | None:
        status, body = await self._server.call("GET", f"/workers/v1/tasks/{task_id}", give_up_s=10)
        return None if status == 404 else (body["lastSeq"], body["holder"])

    async def mine(self) -> list[Held]:
        return []

    async def suspect(self) -> int:
        return 0

    async def expired(self) -> list[Held]:
        return []

    async def release(self, task_ids: list[str]) -> None:
        await self._tasks.release(task_ids)


def _known(live: LiveTask) -> dict[str, Any]:
    user = next((m.message_id for m in reversed(live.task.history) if m.role is Role.USER), None)
    return {"seq": live.seq, "user": user}


class _NoBus:
    """The runner hears of queued work by its claims' long poll: no doorbell here."""

    def on_queued(self, callback: Callable[[], None]) -> None:
        return None


class Worker:
    """One worker process: its runner, and the loop that hears what others did to its tasks."""

    def __init__(
        self,
        settings: Settings,
        server: Server,
        role: roles_.Role,
        agent: Agent,
        slots: int,
        prices: PriceTable | None = None,
    ) -> None:
        self.settings = settings
        self.prices = prices
        self.server = server
        self.role = role
        self.agent = agent
        self.slots = slots
        self.runner: Runner | None = None
        self.tasks: RemoteTasks | None = None

    async def run(self, stop: asyncio.Event) -> None:
        status, me = await self.server.call("GET", "/workers/v1/whoami")
        if status != 200:
            raise ServerError(f"the server does not serve role {self.role.name!r} to workers: {me}")
        ttl = float(me["leaseTtlS"])
        self.tasks = RemoteTasks(self.server, me["holder"], self.settings.db_outage_grace_s)
        leases = RemoteLeases(self.server, self.tasks)
        if me.get("heartbeatS"):
            leases.claim_wait_s = min(CLAIM_WAIT_S, float(me["heartbeatS"]) / 2)
        await self.agent.setup()
        self.runner = Runner(
            self.tasks,
            leases,
            _NoBus(),
            self.agent,
            max_concurrent=self.slots,
            timeout_s=self.role.timeout_s,
            cancel_grace_s=self.settings.cancel_grace_s,
            lease_ttl_s=ttl,
            queue_poll_s=1.0,
            prices=self.prices,
            role=self.role.name,
        )
        runner = self.runner
        self.server.load = lambda: {"slots": runner.slots, "running": runner.running}
        await self.runner.open()
        # The start-up line is logged whatever LOG_LEVEL says (its logger is at INFO), as the server's is.
        start = logging.getLogger("app.start")
        start.setLevel(logging.INFO)
        start.info("worker %s serving role %s with %d slot(s)", me["holder"], self.role.name, self.slots)
        news = asyncio.create_task(self._news(ttl), name="news")
        try:
            await stop.wait()
        finally:
            news.cancel()
            await asyncio.gather(news, return_exceptions=True)
            await self.runner.aclose()
            await self.agent.aclose()
            with contextlib.suppress(Exception):
                await self.server.call("POST", "/workers/v1/release", {"leaving": True}, give_up_s=3)

    async def _news(self, ttl: float) -> None:
        """What others did to this worker's tasks: answers go to their runs, lost tasks are stopped."""
        assert self.tasks is not None and self.runner is not None
        while True:
            held = self.tasks.held
            if not held:
                await asyncio.sleep(0.5)
                continue
            try:
                _status, body = await self.server.call(
                    "POST", "/workers/v1/sync", {"tasks": held, "waitS": min(10.0, ttl / 3)}, give_up_s=ttl
                )
            except TimeoutError:
                continue
            for task_id, item in body.get("news", {}).items():
                await self._apply(task_id, item)

    async def _apply(self, task_id: str, item: dict[str, Any]) -> None:
        assert self.tasks is not None and self.runner is not None
        if item.get("lost"):
            self.runner.lost(task_id)
            return
        live = self.tasks.get(task_id)
        message = item.get("message")
        if live is None or message is None or item.get("state") != TaskState.WORKING.value:
            return
        answer = Message.from_store(message)
        if live.task.status.state not in INTERRUPTED_STATES or any(
            m.message_id == answer.message_id for m in live.task.history
        ):
            return
        async with live.lock:
            live.task.status = status_update(task_id, live.task.context_id, TaskState.WORKING).status
            live.task.history.append(answer)
            live.seq = max(live.seq, int(item["lastSeq"]))
        await self.runner.answer(task_id, answer)


def main(server_url: str, role_name: str, instance: str | None, slots: int | None) -> None:
    """`a2a-server worker`: run until SIGTERM or Ctrl-C."""
    from app.wiring import price_table, role_agent

    settings = Settings()
    instance = instance or f"{socket.gethostname()}-{os.getpid()}"
    # Logs and traces as the server's: its records name this worker as their replica, its runs' spans
    # continue the traces the server stored with the tasks it hands over.
    logs.setup(settings.log_level, settings.log_format, f"worker:{instance}")
    traces.setup(traces.endpoint_from(settings), f"worker:{instance}", settings.otel_service_name)
    key, token = os.environ.get("A2A_WORKER_KEY"), os.environ.get("A2A_WORKER_TOKEN")
    logs.add_secrets(v for v in (key, token) if v)
    if not key and not token:
        raise SystemExit(
            "error: set A2A_WORKER_KEY (a key listed in the server's WORKER_KEYS) or A2A_WORKER_TOKEN"
        )
    headers = {"X-API-Key": key} if key else {"Authorization": f"Bearer {token}"}
    roles = roles_.load(settings)
    role = roles.get(role_name) or next(iter(roles.values()))
    role = roles_.Role(role_name, role.entry, slots or role.slots, role.timeout_s, True)
    agent = role_agent(settings, role, len(roles) > 1)
    prices = price_table(settings)
    server = Server(server_url, headers, role_name, instance)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await Worker(settings, server, role, agent, role.slots, prices).run(stop)
        finally:
            await server.aclose()

    try:
        asyncio.run(serve())
    except ServerError as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        traces.shutdown()
