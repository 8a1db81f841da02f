"""A remote worker's runner over its stand-ins (`app/worker.py`), against a fake server: what its heartbeat
asks of them is only what the `runner.RunTasks` and `runner.RunLeases` protocols say."""

from __future__ import annotations

import asyncio
from typing import Any

from app.agents.sdk import TaskContext
from app.protocol.model import Message, Part, Role, Task, TaskState, TaskStatus, iso, utcnow
from app.runner.runner import Runner
from app.tasks.workers import Claimed
from app.worker import RemoteLeases, RemoteTasks, _NoBus
from tests.support.inproc import WAIT_S, ScriptAgent

HOLDER = "worker:alice:w1"


class Server:
    """The worker endpoints, as far as the runner calls them; `stored` is what a lease read answers."""

    def __init__(self, claimed: Claimed) -> None:
        self.claimed = claimed
        self.stored: tuple[int, str] = (1, HOLDER)
        self.load = dict

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None, **_: object) -> Any:
        if path == "/workers/v1/claim":
            return 200, {"tasks": [self.claimed.to_wire()]}
        if path == "/workers/v1/sync":
            return 200, {"news": {}}
        if path.startswith("/workers/v1/tasks/") and method == "GET":
            return 200, {"lastSeq": self.stored[0], "holder": self.stored[1]}
        return 200, {}


async def test_a_workers_heartbeat_looks_up_no_webhooks_and_rings_no_followers() -> None:
    """The replicas that write a worker's events read the task's webhooks themselves, and nobody follows a
    task at the worker: its heartbeat with a run alive, and after a task was taken from it, asks neither of a
    store or a bus it does not have (it raised AttributeError at each heartbeat, logged as a failure)."""
    message = Message("m-1", Role.USER, [Part(text="hi")], task_id="t-w", context_id="c-w")
    task = Task(
        id="t-w", context_id="c-w", status=TaskStatus(TaskState.SUBMITTED, iso(utcnow())), history=[message]
    )
    server = Server(Claimed(task, "alice", 1))
    tasks = RemoteTasks(server, HOLDER, 10.0)  # type: ignore[arg-type]
    leases = RemoteLeases(server, tasks)  # type: ignore[arg-type]
    started, stopped = asyncio.Event(), asyncio.Event()

    async def script(ctx: TaskContext) -> None:
        async def hook() -> None:
            stopped.set()

        ctx.on_cancel(hook)
        started.set()
        await asyncio.Event().wait()

    runner = Runner(tasks, leases, _NoBus(), ScriptAgent(script), 1, timeout_s=WAIT_S, cancel_grace_s=1)
    try:
        assert await leases.claim_queued(1) == ["t-w"]
        await runner._start_claimed("t-w")
        await asyncio.wait_for(started.wait(), WAIT_S)
        await runner._heartbeat()  # a run alive, its task with no webhook known here

        server.stored = (1, "r2")  # taken over by a replica, nothing written yet
        runner.lost("t-w")
        await asyncio.wait_for(stopped.wait(), WAIT_S)
        async with asyncio.timeout(WAIT_S):
            while runner.running:
                await asyncio.sleep(0.01)
        assert tasks.get("t-w") is None
        server.stored = (2, "r2")  # the taker wrote
        await runner._heartbeat()
    finally:
        await runner.aclose()
