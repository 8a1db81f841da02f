"""The remote worker process: `a2a-server worker --server URL --role ROLE` runs one role's agents on this
machine and connects out to the server over HTTP(S) (through the same load balancer as every client),
holding a worker credential only (`A2A_WORKER_KEY`, or a JWT with the worker scope in `A2A_WORKER_TOKEN`),
no database or Redis credential.

It is the replica's `Runner`, jailed agents and all, over the stand-ins of `runner/remote.py` for what a
replica reads from the database (`RemoteLeases`, `RemoteTasks`), without a reaper (the replicas reap). A
third loop (`Worker._news`) long-polls the server for what others did to its tasks: an answer to a waiting
task goes to its run, a cancel or a lease taken stops it. At SIGTERM the runner drains its working runs
(each agent stops and saves a checkpoint) and hands their tasks back to the server's queue
(`RemoteTasks.hand_on`), the syncs renewing the leases until it is done. The protocol is in
`app/api/endpoints/workers.py`.
Like a replica it sweeps its own disk's workspaces (`agents/cli/sweep.py`), asking the server about their
contexts (`/workers/v1/contexts`: only its role's tasks count).

Its agents run on this machine's settings (`worker_options`): a task's repository is checked against the
worker's REPO_ALLOW and checked out under its REPO_CACHE_ROOT and AGENT_WORKSPACE_ROOT, after the replica
that admitted it checked it against its own.

A run's calls to other agents (`send_to_agent`, ...) are made by the server, over the worker API
(`runner/remote_calls.py`), while this worker holds the run's task; so are its checkpoints kept
(`runner/remote_checkpoints.py`), as the task's owner's, within the lower of the two CHECKPOINT_MAX_MB.

It imports the runner and its remote stand-ins, the roles, the agents' options and the settings;
`app.wiring` only for the price table and the workspace sweep, as a replica builds them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app import roles as roles_
from app.agents.options import AgentOptions
from app.agents.sdk import Agent
from app.protocol.events import status_update
from app.protocol.model import INTERRUPTED_STATES, Message, TaskState
from app.runner.prices import PriceTable
from app.runner.remote import CLAIM_WAIT_S, NoBell, RemoteLeases, RemoteTasks, Server, ServerError
from app.runner.remote_calls import RemoteCalls
from app.runner.remote_checkpoints import RemoteCheckpoints
from app.runner.runner import Runner
from app.settings import Settings
from app.tasks.held import LiveTask
from app.telemetry import logs, traces

log = logging.getLogger(__name__)


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
        self.stopping = False
        """The worker is shutting down: an answer to a waiting task is left to whoever takes the task next."""
        self.checkpoint_max_bytes: int | None = int(settings.checkpoint_max_mb * 1024 * 1024)
        """The largest checkpoint archive a run saves: the worker's CHECKPOINT_MAX_MB, or the server's when
        lower; None: the server keeps none."""

    async def run(self, stop: asyncio.Event) -> None:
        status, me = await self.server.call("GET", "/workers/v1/whoami")
        if status != 200:
            raise ServerError(f"the server does not serve role {self.role.name!r} to workers: {me}")
        ttl = float(me["leaseTtlS"])
        server_most = me.get("checkpointMaxBytes")
        if server_most is None:
            self.checkpoint_max_bytes = None
        else:
            self.checkpoint_max_bytes = min(self.checkpoint_max_bytes, int(server_most))
        self.tasks = RemoteTasks(self.server, me["holder"], self.settings.db_outage_grace_s)
        leases = RemoteLeases(self.server, self.tasks)
        if me.get("heartbeatS"):
            leases.claim_wait_s = min(CLAIM_WAIT_S, float(me["heartbeatS"]) / 2)
        await self.agent.setup()
        self.runner = Runner(
            self.tasks,
            leases,
            NoBell(),
            self.agent,
            max_concurrent=self.slots,
            timeout_s=self.role.timeout_s,
            cancel_grace_s=self.settings.cancel_grace_s,
            lease_ttl_s=ttl,
            queue_poll_s=1.0,
            prices=self.prices,
            role=self.role.name,
            calls=self._calls,
            checkpoints=self._checkpoints if self.checkpoint_max_bytes is not None else None,
        )
        runner = self.runner
        self.server.load = lambda: {"slots": runner.slots, "running": runner.running}
        await self.runner.open()
        from app.wiring import sweep_of

        sweep = None if self.settings.agent_repo_path else sweep_of(self.settings, self._contexts)
        if sweep is not None:
            await sweep.open()
        # The start-up line is logged whatever LOG_LEVEL says (its logger is at INFO), as the server's is.
        start = logging.getLogger("app.start")
        start.setLevel(logging.INFO)
        start.info("worker %s serving role %s with %d slot(s)", me["holder"], self.role.name, self.slots)
        news = asyncio.create_task(self._news(ttl), name="news")
        try:
            await stop.wait()
        finally:
            # The news loop's syncs renew the leases while the runs drain (a checkpoint may take a while to
            # save and send): it stops after the runner, taking no answer meanwhile.
            self.stopping = True
            if sweep is not None:
                await sweep.aclose()
            await self.runner.aclose()
            news.cancel()
            await asyncio.gather(news, return_exceptions=True)
            await self.agent.aclose()
            try:
                await self.server.call("POST", "/workers/v1/release", {"leaving": True}, give_up_s=10)
            except Exception as exc:  # the listing then drops it after DISCOVERY_MAX_AGE_S
                log.warning(
                    "could not tell the server this worker is leaving (%s): listed until it ages out", exc
                )

    def _calls(self, live: LiveTask) -> RemoteCalls:
        """A run's calls to other agents, made by the server for its task while this worker holds it."""
        return RemoteCalls(self.server, live.task.id, self.settings.agent_call_wait_s)

    def _checkpoints(self, live: LiveTask) -> RemoteCheckpoints:
        """A run's checkpoints, kept by the server for its task while this worker holds it."""
        assert self.checkpoint_max_bytes is not None
        return RemoteCheckpoints(self.server, live.task.id, self.checkpoint_max_bytes)

    async def _contexts(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, str]]:
        """The server's answer for the workspace sweep of this worker's disk (only its role's tasks count);
        ServerError when it gives none (a server without the call: nothing is removed)."""
        status, body = await self.server.call(
            "POST", "/workers/v1/contexts", {"contexts": [list(k) for k in keys]}, give_up_s=60
        )
        if status != 200:
            raise ServerError(f"the server did not answer about contexts (HTTP {status}): {body}")
        return {(o, c): (int(n), str(at)) for o, c, n, at in body["contexts"]}

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
        if self.stopping:
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


def worker_options(settings: Settings, instance: str) -> AgentOptions:
    """The agents' options on this worker: its own settings (REPO_ALLOW, REPO_CACHE_ROOT,
    AGENT_WORKSPACE_ROOT: the checkouts are made here), named as the worker, whose CLIs are tagged
    `worker:<instance>:<workspace root>`: what its next life on this machine finds again, and no other
    process's (a replica's tag, hostname:port, or the instance name alone would let this worker's start-up
    kill the CLIs of a replica, or of a worker of another cluster named alike, as its own orphans)."""
    root = Path(settings.agent_workspace_root).resolve()
    tag = f"worker:{instance}:{root}"
    return AgentOptions.from_settings(settings).replace(worker=instance, owner=tag)


def main(server_url: str, role_name: str, instance: str | None, slots: int | None) -> None:
    """`a2a-server worker`: run until SIGTERM or Ctrl-C."""
    from app.wiring import price_table

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
    agent = roles_.role_agent(settings, role, len(roles) > 1, worker_options(settings, instance))
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
