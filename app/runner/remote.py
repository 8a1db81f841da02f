"""A remote worker's stand-ins for what a replica's runner reads from the database, over the server's worker
endpoints (`app/api/endpoints/workers.py`), beside the protocols they implement (`runner.RunLeases`,
`run.RunTasks`, `runner.QueueBell`): `Server` (the calls, retried while the server cannot answer),
`RemoteTasks` (the runs' tasks, whose events the worker numbers itself with the same `tasks.step.step` and
hands to the server in order, retried until acknowledged: idempotent by event number, so a replica
restarting under it loses and doubles nothing; at a clean shutdown a drained task is handed back to the
queue, `hand_on`), `RemoteLeases` (claims, lease renewals, a lease read) and
`NoBell`. The worker process (`app/cli/worker.py`) builds its `Runner` on them, with no reaper: the
replicas reap for it.

It imports httpx, the worker wire forms (`tasks/worker_wire.py`), `tasks/held.py` and `tasks/step.py`: no
store, bus or settings, as a worker holds no database or Redis credential.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

import httpx

from app.protocol.events import status_update
from app.protocol.model import TaskState
from app.store.leases import Held
from app.store.outage import backoff
from app.tasks.held import LiveTask, TaskLostError, UnrecordedError
from app.tasks.step import step
from app.tasks.worker_wire import Claimed, events_to_wire, known_to_wire

log = logging.getLogger("app.worker")
"""Named as the worker process's records always were."""

CLAIM_WAIT_S = 20.0
"""How long one claim waits at the server for work (a long poll)."""
HAND_ON_S = 10.0
"""How long a shutting-down worker retries handing a drained task back while the server cannot answer."""


class ServerError(Exception):
    """The server refused the worker (credential, role): retrying cannot help."""


class Server:
    """The worker endpoints of one server, retried across connection failures and 5xx (a replica restarting
    behind the load balancer) with backoff."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        role: str,
        instance: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: httpx's own by default (a test's app in process otherwise)."""
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"), headers=headers, timeout=httpx.Timeout(10, read=45), transport=transport
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
        if method == "GET":
            resp = await self.send(method, path, give_up_s=give_up_s)
        else:
            json = {**self.ask, **self.load(), **(body or {})}
            resp = await self.send(method, path, json=json, give_up_s=give_up_s)
        return resp.status_code, resp.json()

    async def send(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        give_up_s: float | None = None,
    ) -> httpx.Response:
        """The answer below 500, to a JSON body (`json`), raw bytes (`content`, with the role and instance in
        the query) or none (the same query); retried as `call` is. ServerError when the credential is
        refused."""
        loop = asyncio.get_running_loop()
        deadline = None if give_up_s is None else loop.time() + give_up_s
        delay = 0.1
        while True:
            try:
                if json is not None:
                    resp = await self._http.request(method, path, json=json, headers=headers)
                else:
                    resp = await self._http.request(
                        method, path, params=self.ask, content=content, headers=headers
                    )
                if resp.status_code < 500:
                    if resp.status_code in (401, 403):
                        raise ServerError(f"the server refused the worker credential: {resp.text}")
                    return resp
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
        return {task_id: known_to_wire(live) for task_id, live in self._live.items()}

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

    async def hand_on(self, task_id: str, why: str) -> str | None:
        """Hand a drained task (its run stopped, its checkpoint saved) back to the server's queue to go on
        elsewhere (`POST /workers/v1/tasks/{id}/requeue`); None when the server did, else why not (the
        runner then fails the task with it). TaskLostError once it is not this worker's."""
        if task_id not in self._live:
            return " It was no longer held here."
        path = f"/workers/v1/tasks/{task_id}/requeue"
        status, body = await self._server.call("POST", path, {"reason": why}, give_up_s=HAND_ON_S)
        if status == 409:
            self.lose(task_id)
            raise TaskLostError(task_id)
        if status != 200:
            raise RuntimeError(f"the server refused to hand task {task_id} on (HTTP {status}): {body}")
        if body.get("handedOn"):
            self._live.pop(task_id, None)
            return None
        return str(body.get("why") or "")

    async def release(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            self._live.pop(task_id, None)
        if task_ids:
            await self._server.call("POST", "/workers/v1/release", {"tasks": task_ids}, give_up_s=5)


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
            c = Claimed.from_wire(item)
            self._tasks.claimed[c.task.id] = LiveTask(c.task, c.owner, c.last_seq, traceparent=c.traceparent)
            ids.append(c.task.id)
        return ids

    async def renew(self, task_ids: Collection[str]) -> set[str]:
        if not task_ids:
            return set()
        held = {t: known_to_wire(live) if (live := self._tasks.get(t)) else {"seq": 0} for t in task_ids}
        _status, body = await self._server.call("POST", "/workers/v1/sync", {"tasks": held}, give_up_s=10)
        lost = {t for t, item in body.get("news", {}).items() if item.get("lost")}
        return set(task_ids) - lost

    async def recorded(self, task_id: str) -> tuple[int, str | None] | None:
        status, body = await self._server.call("GET", f"/workers/v1/tasks/{task_id}", give_up_s=10)
        return None if status == 404 else (body["lastSeq"], body["holder"])

    async def mine(self) -> list[Held]:
        return []

    async def release(self, task_ids: list[str]) -> None:
        await self._tasks.release(task_ids)


class NoBell:
    """The runner hears of queued work by its claims' long poll: no doorbell here."""

    def on_queued(self, callback: Callable[[], None]) -> None:
        return None
