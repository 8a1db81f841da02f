"""A webhook stored on one replica reaches the run of its task on another even when the word between
them is lost: the holder's heartbeat looks the webhooks of its quiet runs up (`Runner._webhooks`).

Two replicas on one SQLite file, each on a bus of its own (as with Redis restarting: `r2`'s word to the
holder goes nowhere). `r1` holds the task with a long lease TTL, so its heartbeat runs only when the test
runs it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.agents.sdk import TaskContext
from app.api.deps import Components
from app.api.edge.auth import Authenticator, AuthOptions
from app.protocol.model import PushConfig, TaskState
from app.store.models import EventRow, PushConfigRow, PushOutboxRow
from app.tasks import control
from app.wiring import wire
from tests.support.inproc import OWNER, WAIT_S, ScriptAgent, create_tables, send, settings_for, until


class Agent:
    """Says one thing each time it is told to, until told to finish."""

    def __init__(self) -> None:
        self.speak: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, task: TaskContext) -> None:
        await task.working()
        while (text := await self.speak.get()) != "done":
            await task.say(text)


@asynccontextmanager
async def replica(db: Path, agent: Agent, replica_id: str) -> AsyncIterator[Components]:
    settings = settings_for(
        db, replica_id=replica_id, agent_timeout_s=600.0, lease_ttl_s=60.0, push_deliver=False
    )
    async with wire(settings, ScriptAgent(agent), Authenticator(AuthOptions.from_settings(settings))) as c:
        yield c


async def notified(c: Components, task_id: str) -> int:
    query = (
        select(func.count())
        .select_from(PushOutboxRow)
        .join(PushConfigRow, PushConfigRow.pk == PushOutboxRow.config_pk)
        .where(PushConfigRow.task_id == task_id)
    )
    async with c.engine.connect() as conn:
        return int(await conn.scalar(query) or 0)


async def said(c: Components, task_id: str, n: int) -> None:
    """Until the task's log holds `n` events."""
    async with asyncio.timeout(WAIT_S):
        while True:
            async with c.engine.connect() as conn:
                count = await conn.scalar(
                    select(func.count()).select_from(EventRow).where(EventRow.task_id == task_id)
                )
            if count >= n:
                return
            await asyncio.sleep(0.05)


async def test_a_webhook_whose_word_to_the_holder_was_lost_is_notified_after_its_next_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "CONTROL_TIMEOUT_S", 0.2)  # the word goes nowhere: no need to wait 5 s
    db = tmp_path / "a2a.db"
    await create_tables(db)
    agent = Agent()
    async with replica(db, agent, "r1") as r1, replica(db, agent, "r2") as r2:
        task_id = (await send(r1, "work", blocking=False)).id
        await until(r1, task_id, TaskState.WORKING)
        await r2.service.set_push_config(OWNER, task_id, PushConfig(url="http://127.0.0.1:9/hook"))
        async with r1.engine.connect() as conn:
            events = await conn.scalar(
                select(func.count()).select_from(EventRow).where(EventRow.task_id == task_id)
            )
        agent.speak.put_nowait("before the heartbeat")
        await said(r1, task_id, events + 1)
        assert await notified(r1, task_id) == 0, "the holder did not hear of the webhook: no notification yet"
        await r1.runner._heartbeat()
        agent.speak.put_nowait("after the heartbeat")
        await said(r1, task_id, events + 2)
        assert await notified(r1, task_id) == 1, "the heartbeat found the webhook: this event is notified"
        agent.speak.put_nowait("done")
        await until(r1, task_id, TaskState.COMPLETED)
        assert await notified(r1, task_id) > 1, "and so is its end"
