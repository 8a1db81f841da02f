"""Reaping without false verdicts, and no agent left running for a task that ended elsewhere.

Two replicas (`r1` runs the agents, `r2` reaps) on one SQLite file, each wired as the app wires it. An outage
is played by what it leaves behind: the holder's lease expired in the database while the holder lives on.
The holder's renewal is held back deterministically: `r1` has a long lease TTL (its heartbeat is tens of
seconds away), so it renews only when the test runs one heartbeat, while `r2`'s short TTL keeps its reaper
busy every fifth of a second.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app.agents.sdk import TaskContext
from app.api.deps import Components
from app.api.edge.auth import Authenticator, AuthOptions
from app.api.errors import http_headers
from app.cli.admin import tasks_cancel
from app.protocol.errors import UnavailableError, UnsupportedOperationError
from app.protocol.model import TaskState, utcnow
from app.store.models import EventRow, TaskRow
from app.tasks.control import UnreachableHolderError
from app.tasks.follow import DEAF_POLL_S
from app.tasks.losses import Losses
from app.wiring import wire
from tests.support.inproc import (
    OWNER,
    WAIT_S,
    ScriptAgent,
    create_tables,
    running,
    seeded_write,
    send,
    settings_for,
    status_text,
    until,
)

LOST_LOG = "was ended or taken over by another replica"


class Agent:
    """A run that says it started, then waits to be told to speak or to finish; records its stop."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.speak = asyncio.Event()
        self.finish = asyncio.Event()
        self.stopped = asyncio.Event()

    async def __call__(self, task: TaskContext) -> None:
        async def hook() -> None:
            self.stopped.set()

        task.on_cancel(hook)
        await task.working()
        self.started.set()
        await self.speak.wait()
        await task.say("still here")
        await self.finish.wait()


@asynccontextmanager
async def replica(
    db: Path, agent: Agent | Asker, replica_id: str, **overrides: Any
) -> AsyncIterator[Components]:
    # No agent timeout within the test: only what the test is about may stop a run.
    settings = settings_for(db, replica_id=replica_id, agent_timeout_s=600.0, **overrides)
    async with wire(settings, ScriptAgent(agent), Authenticator(AuthOptions.from_settings(settings))) as c:
        yield c


@asynccontextmanager
async def pair(
    tmp_path: Path, agent: Agent, r2_ttl_s: float = 1.0, **r2: Any
) -> AsyncIterator[tuple[Components, Components]]:
    """`r1` (lease TTL 60 s: renews only when told) and `r2` (lease TTL 1 s: reaps every 0.2 s)."""
    db = tmp_path / "a2a.db"
    await create_tables(db)
    async with (
        replica(db, agent, "r1", lease_ttl_s=60.0) as r1,
        replica(db, agent, "r2", lease_ttl_s=r2_ttl_s, **r2) as r2,
    ):
        yield r1, r2


async def lease(c: Components, task_id: str) -> tuple[str | None, Any, Any, str]:
    async with c.engine.connect() as conn:
        row = (
            await conn.execute(
                select(
                    TaskRow.lease_owner, TaskRow.lease_expires_at, TaskRow.lease_suspect_at, TaskRow.state
                ).where(TaskRow.id == task_id)
            )
        ).one()
    return row[0], row[1], row[2], row[3]


async def expire(c: Components, task_id: str) -> None:
    """What an outage longer than the lease TTL leaves: the holder's lease expired, nobody renewed it."""
    async with c.engine.begin() as conn:
        await conn.execute(
            update(TaskRow)
            .where(TaskRow.id == task_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=30))
        )


async def until_lease(c: Components, task_id: str, marked: bool) -> None:
    """Until a reaper has marked the task's expired lease (or the mark is gone)."""
    async with asyncio.timeout(WAIT_S):
        while ((await lease(c, task_id))[2] is not None) != marked:
            await asyncio.sleep(0.05)


async def until_idle(c: Components) -> None:
    async with asyncio.timeout(WAIT_S):
        while c.runner.running:
            await asyncio.sleep(0.05)


async def start_on_r1(r1: Components, agent: Agent) -> str:
    task_id = (await send(r1, "work", blocking=False)).id
    await until(r1, task_id, TaskState.WORKING)
    assert (await lease(r1, task_id))[0] == r1.replica_id
    return task_id


async def test_an_expired_lease_is_marked_not_reaped_and_the_holders_renewal_or_commit_keeps_its_task(
    tmp_path,
):
    agent = Agent()
    ttl = 3.0  # r2's: the time from its mark to a void lease, a margin for two passes of its reaper
    async with pair(tmp_path, agent, r2_ttl_s=ttl) as (r1, r2):
        task_id = await start_on_r1(r1, agent)

        await expire(r1, task_id)
        await until_lease(r2, task_id, marked=True)
        await r2.reaper.sweep()  # two more passes of r2's reaper, well within its TTL after the mark
        await r2.reaper.sweep()
        assert (await lease(r2, task_id))[3] == "working", "reaped on sight of an expired lease"

        await r1.runner._heartbeat()  # the holder is back: one heartbeat
        owner, expires, suspect, _ = await lease(r1, task_id)
        assert (owner, suspect) == ("r1", None)
        assert expires.replace(tzinfo=None) > utcnow().replace(tzinfo=None)  # SQLite keeps no zone
        await asyncio.sleep(ttl + 0.5)  # past r2's lease TTL after its mark: the renewal, not luck, keeps it
        assert (await lease(r2, task_id))[3] == "working"

        await expire(r1, task_id)  # a second outage; this time the holder's next commit comes back first
        await until_lease(r2, task_id, marked=True)
        agent.speak.set()
        await until_lease(r1, task_id, marked=False)
        await asyncio.sleep(ttl + 0.5)
        assert (await lease(r2, task_id))[3] == "working"

        agent.finish.set()
        done = await until(r1, task_id, TaskState.COMPLETED)
        assert [a.parts[0].text for a in done.artifacts if a.parts] == ["still here"]
        assert not agent.stopped.is_set()


async def test_a_holder_that_never_renews_is_reaped_and_its_heartbeat_stops_the_agent(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    agent = Agent()
    async with pair(tmp_path, agent) as (r1, r2):
        task_id = await start_on_r1(r1, agent)
        await expire(r1, task_id)
        reaped = await until(r2, task_id, TaskState.FAILED)
        assert status_text(reaped).startswith("Replica r1 running this task stopped renewing its lease")
        assert r1.runner.running == 1 and not agent.stopped.is_set()

        await r1.runner._heartbeat()  # its lease could not be renewed: the task is not r1's any more
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)
        await until_idle(r1)
        assert any(task_id in r.message and LOST_LOG in r.message for r in caplog.records)
        assert (await r1.service.get(OWNER, task_id)).status.state is TaskState.FAILED


async def test_a_run_whose_next_commit_collides_with_the_reaper_stops_at_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    agent = Agent()
    async with pair(tmp_path, agent) as (r1, r2):
        task_id = await start_on_r1(r1, agent)
        await expire(r1, task_id)
        await until(r2, task_id, TaskState.FAILED)

        agent.speak.set()  # its next event collides with the reaper's: no straggler's grace, stopped
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)
        await until_idle(r1)
        assert any(task_id in r.message and LOST_LOG in r.message for r in caplog.records)
        async with r1.engine.connect() as conn:
            kinds = (
                await conn.execute(
                    select(EventRow.kind).where(EventRow.task_id == task_id).order_by(EventRow.seq)
                )
            ).scalars()
            assert "artifact" not in list(kinds), "the lost run's output was not recorded"
        assert (await r1.service.get(OWNER, task_id)).status.state is TaskState.FAILED


async def test_the_reaper_tells_the_holder_over_the_bus_and_the_agent_stops_without_waiting(tmp_path, caplog):
    redis_url = os.environ.get("TEST_REDIS_URL")
    if not redis_url:
        pytest.skip("TEST_REDIS_URL is not set: `make test` starts Redis and sets it")
    caplog.set_level(logging.WARNING)
    agent = Agent()
    db = tmp_path / "a2a.db"
    await create_tables(db)
    suffix = os.urandom(4).hex()  # replica channels are server-wide on the shared Redis
    async with (
        replica(db, agent, f"r1-{suffix}", lease_ttl_s=60.0, redis_url=redis_url) as r1,
        replica(db, agent, f"r2-{suffix}", lease_ttl_s=1.0, redis_url=redis_url) as r2,
    ):
        task_id = await start_on_r1(r1, agent)
        await expire(r1, task_id)
        await until(r2, task_id, TaskState.FAILED)
        # Neither a heartbeat (60 s away) nor a commit (the agent is quiet): only the notice stops it.
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)
        await until_idle(r1)
        assert any(task_id in r.message and LOST_LOG in r.message for r in caplog.records)


async def test_a_replicas_own_reaper_never_ends_a_run_alive_there(tmp_path):
    agent = Agent()
    async with running(tmp_path, agent, lease_ttl_s=60.0, agent_timeout_s=600.0) as c:
        task_id = (await send(c, "work", blocking=False)).id
        await until(c, task_id, TaskState.WORKING)
        long_ago = utcnow() - timedelta(hours=1)
        async with c.engine.begin() as conn:  # void in the database: expired, and marked long ago
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(lease_expires_at=long_ago, lease_suspect_at=long_ago)
            )
        await c.reaper.sweep()
        await c.reaper.sweep()
        assert (await c.service.get(OWNER, task_id)).status.state is TaskState.WORKING
        assert c.runner.running == 1 and not agent.stopped.is_set()
        agent.speak.set()
        agent.finish.set()
        await until(c, task_id, TaskState.COMPLETED)


async def test_the_heartbeat_renews_only_runs_alive_here(tmp_path):
    """A task leased to this replica whose run is gone (it died without ending it) is not renewed by the
    heartbeat, which does renew the run alive beside it: the orphan's lease expires and the replica's own
    reaper ends it."""
    agent = Agent()
    async with running(tmp_path, agent, lease_ttl_s=1.0, agent_timeout_s=600.0) as c:
        alive = (await send(c, "work", blocking=False)).id
        await until(c, alive, TaskState.WORKING)
        await c.writer.commit(seeded_write("orphan", TaskState.WORKING, "r1", 1))
        reaped = await until(c, "orphan", TaskState.FAILED)
        assert status_text(reaped).startswith("Replica r1 running this task stopped renewing its lease")
        assert (await c.service.get(OWNER, alive)).status.state is TaskState.WORKING
        agent.speak.set()
        agent.finish.set()
        await until(c, alive, TaskState.COMPLETED)


async def test_a_stream_on_the_holder_sees_a_cancel_written_after_its_lease_was_taken(tmp_path, caplog):
    """The admin command line without Redis takes the lease, then writes its cancel: two commits. A holder
    whose heartbeat falls between them finds its lease gone and nothing new in the log; the stream open on
    it must still get the cancel once it is written, though no bus rings it there (here: each replica has
    its own in-process bus)."""
    caplog.set_level(logging.WARNING)
    agent = Agent()
    # r2 takes the lease as the admin does and holds no run to renew it: a long TTL, so no reaper ends the
    # task before the test's cancel.
    async with pair(tmp_path, agent, r2_ttl_s=60.0) as (r1, r2):
        task_id = await start_on_r1(r1, agent)
        stream = await r1.service.resubscribe(OWNER, task_id)
        snap = await anext(stream)
        assert snap.task.status.state is TaskState.WORKING
        last = asyncio.create_task(_last(stream))

        await r2.tasks.writable(OWNER, task_id, take_over=True)  # the lease is r2's; nothing written yet
        await r1.runner._heartbeat()
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)  # r1 stopped its agent: the task is not its own
        canceled = await r2.service.cancel(OWNER, task_id, reason="by ops", take_over=True)
        assert canceled.status.state is TaskState.CANCELED
        await r1.runner._heartbeat()  # r1 learns of the write at its next heartbeat, as it would anyway
        rec = await asyncio.wait_for(last, WAIT_S)
        assert rec.event.status.state is TaskState.CANCELED and rec.event.final
        assert any(task_id in r.message and LOST_LOG in r.message for r in caplog.records)


async def test_a_stream_on_a_queued_task_sees_the_admins_cancel_without_a_bus_that_rings_it(tmp_path):
    """One replica on its in-process bus, its slot taken, a second task queued (held by nobody) and followed
    there: the admin command line (no Redis) cancels it, and the stream ends at the cancel though nothing
    rang for it (the stream reads the log every DEAF_POLL_S)."""
    agent = Agent()
    async with running(tmp_path, agent, lease_ttl_s=60.0, agent_timeout_s=600.0, max_concurrent_tasks=1) as c:
        first = await start_on_r1(c, agent)
        queued = (await send(c, "work", blocking=False)).id
        assert (await lease(c, queued))[0] is None
        stream = await c.service.resubscribe(OWNER, queued)
        assert (await anext(stream)).task.status.state is TaskState.SUBMITTED
        last = asyncio.create_task(_last(stream))
        admin = settings_for(tmp_path / "a2a.db", replica_id="admin")
        await tasks_cancel(admin, queued, "by ops", as_json=False, out=io.StringIO())
        rec = await asyncio.wait_for(last, DEAF_POLL_S + WAIT_S)
        assert rec.event.status.state is TaskState.CANCELED and status_text(rec.event) == "by ops"
        assert (await c.service.get(OWNER, first)).status.state is TaskState.WORKING


async def _last(stream: AsyncIterator[Any]) -> Any:
    """The last record of a stream (it ends at the task's terminal state)."""
    last = None
    async for rec in stream:
        last = rec
    return last


async def test_a_cancel_the_holder_cannot_hear_is_written_here_over_its_lease(tmp_path):
    """A cancel forwarded to a holder that does not answer (Redis restarting, the holder just killed; here:
    another in-process bus) was carried out nowhere: first -32603 with HTTP 200, then a 503 to send again,
    which `make soak` still counted whenever a client cancelled a task of a replica just killed. A cancel
    needs nothing of the holder, so it is written here over the lease, as the admin's is; the holder stops
    its run at its next heartbeat."""
    agent = Agent()
    async with pair(tmp_path, agent, r2_ttl_s=60.0) as (r1, r2):
        task_id = await start_on_r1(r1, agent)
        canceled = await r2.service.cancel(OWNER, task_id)
        assert canceled.status.state is TaskState.CANCELED
        assert (await lease(r2, task_id))[3] == "canceled"
        await r1.runner._heartbeat()  # its lease is gone: r1 stops the run
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)


class Asker:
    """A run that asks its user and ends with the answer."""

    async def __call__(self, task: TaskContext) -> None:
        await task.working()
        answer = await task.ask("Proceed?")
        await task.complete(f"got {answer.text()}")


@asynccontextmanager
async def askers(tmp_path: Path) -> AsyncIterator[tuple[Components, Components]]:
    """Two replicas (long lease TTLs: neither reaps) running `Asker`, each on its own in-process bus, so
    neither hears what the other forwards or writes."""
    db = tmp_path / "a2a.db"
    await create_tables(db)
    async with (
        replica(db, Asker(), "r1", lease_ttl_s=60.0) as r1,
        replica(db, Asker(), "r2", lease_ttl_s=60.0) as r2,
    ):
        yield r1, r2


async def test_an_answer_the_holder_cannot_hear_is_a_503_to_send_again_not_an_internal_error(tmp_path):
    """An answer does need the holder (its run waits for it): one forwarded to a holder that does not answer
    is 503 with Retry-After, UNAVAILABLE, and changes nothing."""
    async with askers(tmp_path) as (r1, r2):
        task_id = (await send(r1, "work", blocking=False)).id
        await until(r1, task_id, TaskState.INPUT_REQUIRED)
        with pytest.raises(UnreachableHolderError) as unheard:
            await send(r2, "yes", task_id=task_id)
        err = unheard.value
        assert (err.code, err.http_status, err.grpc_status) == (-32603, 503, "UNAVAILABLE")
        assert http_headers(err) == {"Retry-After": "5"}
        assert (await r1.service.get(OWNER, task_id)).status.state is TaskState.INPUT_REQUIRED


async def test_a_cancel_whose_write_collides_with_the_holders_is_decided_again_not_an_internal_error(
    tmp_path, monkeypatch
):
    """`make soak` (fresh-clone run S): a client's CancelTask at the moment a replica was killed answered
    -32603. The cancel was written over the lease of a holder that did not answer, and between reading the
    task and writing the cancel another writer (the holder, or its next life's recovery) committed the
    task's next event: the collision (`SeqTakenError`) reached the client. The cancel is decided again on the
    task as it now stands."""
    agent = Agent()
    async with pair(tmp_path, agent, r2_ttl_s=60.0) as (r1, r2):
        task_id = await start_on_r1(r1, agent)
        taken = r2.tasks.writable

        async def writable_then_the_holder_writes(*args: Any, **kwargs: Any) -> Any:
            live = await taken(*args, **kwargs)
            if kwargs.get("take_over") and not agent.speak.is_set():
                before = await last_seq(r1, task_id)
                agent.speak.set()  # r1's run commits its next event over the number r2 just read
                async with asyncio.timeout(WAIT_S):
                    while await last_seq(r1, task_id) == before:
                        await asyncio.sleep(0.05)
            return live

        monkeypatch.setattr(r2.tasks, "writable", writable_then_the_holder_writes)
        canceled = await r2.service.cancel(OWNER, task_id)
        assert canceled.status.state is TaskState.CANCELED
        assert (await lease(r2, task_id))[3] == "canceled"
        await r1.runner._heartbeat()
        await asyncio.wait_for(agent.stopped.wait(), WAIT_S)


async def last_seq(c: Components, task_id: str) -> int:
    async with c.engine.connect() as conn:
        return (await conn.execute(select(TaskRow.last_seq).where(TaskRow.id == task_id))).scalar_one()


async def test_an_answer_whose_write_collides_with_another_writers_is_a_503_to_send_again(tmp_path):
    """An answer written here while another replica has taken the task over and written it (unheard yet:
    another in-process bus) collides on the event number; it was not carried out, so the client is told to
    send it again (503), never -32603 with a stack trace in the log, and the next try finds the task ended."""
    async with askers(tmp_path) as (r1, r2):
        task_id = (await send(r1, "work", blocking=False)).id
        await until(r1, task_id, TaskState.INPUT_REQUIRED)
        await r2.service.cancel(OWNER, task_id, reason="by ops", take_over=True)
        with pytest.raises(UnavailableError) as unheard:
            await send(r1, "yes", task_id=task_id)
        assert (unheard.value.http_status, unheard.value.grpc_status) == (503, "UNAVAILABLE")
        with pytest.raises(UnsupportedOperationError):
            await send(r1, "yes", task_id=task_id)
        assert (await r2.service.get(OWNER, task_id)).status.state is TaskState.CANCELED


async def test_a_refusal_never_takes_a_task_a_worker_claimed_however_expired_its_lease(tmp_path, caplog):
    """The reaper refuses a task queued while no instance of its role is live (`Losses.refuse`). A worker's
    claim can come between its look and the refusal, and on a busy machine the worker's lease can be expired
    by then while its run goes on: the refusal leaves such a task to the worker. Taking it and letting it go
    again for not being queued dropped the worker's lease with nothing written, and a `working` task nobody
    holds is claimed as one handed on (found reading the code, not seen in a run). Only a task nobody claimed
    is refused."""
    caplog.set_level(logging.WARNING)
    worker = "worker:box:w1"

    async def seed(writer: Any) -> None:
        await writer.commit(seeded_write("working", TaskState.WORKING, worker, -30, started=True))
        await writer.commit(seeded_write("starting", TaskState.SUBMITTED, worker, -30, started=True))
        await writer.commit(seeded_write("queued", TaskState.SUBMITTED, worker, -30))

    async with running(tmp_path, Agent(), seed=seed, lease_ttl_s=60.0, queue_poll_s=600.0) as c:
        async with c.engine.begin() as conn:  # never claimed: what `queued_before` lists
            await conn.execute(
                update(TaskRow).where(TaskRow.id == "queued").values(lease_owner=None, lease_expires_at=None)
            )
        losses = Losses(c.tasks)
        for task_id, state in (("working", "working"), ("starting", "submitted")):
            assert not await losses.refuse(task_id, "No agent of the role is available.")
            owner, _, _, stored_state = await lease(c, task_id)
            assert (owner, stored_state) == (worker, state), f"{task_id}: the worker's claim was taken"
            assert await c.tasks.parts.leases.recorded(task_id) == (1, worker), "nothing written"
        assert await losses.refuse("queued", "No agent of the role is available.")
        refused = await c.service.get(OWNER, "queued")
        assert refused.status.state is TaskState.FAILED
        assert status_text(refused) == "No agent of the role is available."
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        ended = [m for m in said if " ended failed: " in m]
        assert ended == ["task queued ended failed: No agent of the role is available."], said


async def test_a_worker_reaped_before_its_run_spoke_leaves_its_task_failed_and_a_line_saying_so(
    tmp_path, caplog
):
    """What a worker whose renewals stopped for two lease TTLs, right after its claim, finds when it asks:
    `stored: (2, None)`. Not a lease let go: a reaper ended the task `failed` at its second event (an ending
    clears the lease), as the worker had written nothing yet. The replica that ended it says so in its log,
    the one place that tells it apart (once it said nothing at all)."""
    caplog.set_level(logging.WARNING)
    worker = "worker:box:w1"

    async def seed(writer: Any) -> None:
        await writer.commit(seeded_write("claimed", TaskState.SUBMITTED, worker, -30, started=True))

    async with running(tmp_path, Agent(), seed=seed, lease_ttl_s=60.0, queue_poll_s=600.0) as c:
        long_ago = utcnow() - timedelta(hours=1)
        async with c.engine.begin() as conn:  # void: expired, and marked long ago
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == "claimed")
                .values(lease_expires_at=long_ago, lease_suspect_at=long_ago)
            )
        await c.reaper.sweep()
        reaped = await until(c, "claimed", TaskState.FAILED)
        assert await c.tasks.parts.leases.recorded("claimed") == (2, None)
        assert status_text(reaped).startswith("Worker box:w1 running this task stopped renewing its lease")
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(m.startswith("task claimed ended failed: Worker box:w1") for m in said), said
