"""The task service and the runner in this process, wired as the app wires them (`app.wiring.wire`), on
the in-process MemoryBus and a fresh SQLite file; tiny agents written in the tests (tests/tasks/,
tests/runner/) drive them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from app.agents.sdk import Agent, TaskContext
from app.api.deps import Components
from app.api.edge.auth import Authenticator, AuthOptions
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import (
    Message,
    Part,
    Role,
    SendConfig,
    StateTransition,
    Task,
    TaskState,
    TaskStatus,
    iso,
    new_id,
    utcnow,
)
from app.settings import Settings
from app.store import rows
from app.store.db import create_engine
from app.store.models import Base
from app.store.write import Write
from app.store.writer import Writer
from app.wiring import wire

OWNER = "alice"
WAIT_S = 30.0
"""A guard against a hang, never a timing assertion: every wait here ends on an event long before."""
AGENT_TIMEOUT_S = 600.0
"""A run's hard limit, far above every wait: a run slowed by a busy machine fails the test's wait, as a
timeout, instead of ending the task as one that did not finish."""


class ScriptAgent(Agent):
    """An agent whose run is the coroutine the test gives it."""

    name = "Test Agent"
    description = "Runs the script a test gives it."

    def __init__(self, script: Callable[[TaskContext], Awaitable[None]]) -> None:
        self._script = script

    async def run(self, task: TaskContext) -> None:
        await self._script(task)


def user(text: str, task_id: str | None = None, context_id: str | None = None) -> Message:
    return Message(new_id(), Role.USER, [Part(text=text)], task_id=task_id, context_id=context_id)


def texts(task: Task) -> list[str]:
    """The text of every artifact of the task, in order."""
    return ["".join(p.text or "" for p in a.parts) for a in task.artifacts]


def status_text(task: Task) -> str:
    message = task.status.message
    return "" if message is None else "".join(p.text or "" for p in message.parts)


def settings_for(db: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{db}",
        "redis_url": None,
        "replica_id": "r1",
        "auth_mode": "off",
        "blocking_timeout_s": WAIT_S,
        "agent_timeout_s": AGENT_TIMEOUT_S,
        "cancel_grace_s": 1.0,
        "push_deliver": False,
        "push_notification_allow_http": True,
        "push_notification_allowed_cidrs": "127.0.0.0/8",
        "grpc_port": 0,
        **overrides,
    }
    return Settings(_env_file=None, **values)


async def create_tables(db: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    await engine.dispose()


@asynccontextmanager
async def running(
    tmp_path: Path,
    script: Callable[[TaskContext], Awaitable[None]],
    seed: Callable[[Writer], Awaitable[None]] | None = None,
    pure: bool = False,
    **overrides: Any,
) -> AsyncIterator[Components]:
    """The components over a fresh database (with `seed`'s rows written first, before the runner opens);
    `pure`: the agent says it has no effects beyond its events (`Agent.pure`)."""
    db = tmp_path / "a2a.db"
    await create_tables(db)
    if seed is not None:
        engine = create_engine(f"sqlite+aiosqlite:///{db}")
        writer = Writer(engine)
        writer.start()
        await seed(writer)
        await writer.stop()
        await engine.dispose()
    settings = settings_for(db, **overrides)
    agent = ScriptAgent(script)
    agent.pure = pure
    async with wire(settings, agent, Authenticator(AuthOptions.from_settings(settings))) as components:
        yield components


async def send(c: Components, text: str, blocking: bool = True, **message: Any) -> Task:
    task = await c.service.send(OWNER, user(text, **message), SendConfig(blocking=blocking))
    assert isinstance(task, Task), task
    return task


async def until(c: Components, task_id: str, state: TaskState) -> Task:
    """The task once it reaches `state`, following its event log."""
    async with asyncio.timeout(WAIT_S):
        async for item in await c.service.resubscribe(OWNER, task_id):
            if isinstance(item, EventRecord):
                if isinstance(item.event, StatusUpdate) and item.event.status.state is state:
                    break
            elif item.task.status.state is state:
                break
    return await c.service.get(OWNER, task_id)


def seeded_write(
    task_id: str, state: TaskState, lease_owner: str, lease_ttl_s: float, started: bool = False
) -> Write:
    """A task's first rows as a replica's earlier life left them: `state`, leased to `lease_owner` until
    `lease_ttl_s` from now (negative: already expired); `started`: with its run started (`run_started_at`)."""
    now = utcnow()
    status = TaskStatus(state, iso(now))
    message = user("seeded", task_id=task_id, context_id=f"ctx-{task_id}")
    task = Task(
        id=task_id,
        context_id=f"ctx-{task_id}",
        status=status,
        history=[message],
        transitions=[StateTransition(state, status.timestamp)],
    )
    first = [EventRecord(1, StatusUpdate(task_id, task.context_id, status))]
    expires = now + timedelta(seconds=lease_ttl_s)
    return Write(
        new_task=rows.new_task(task, OWNER, now, lease_owner, expires, None, run_started=started),
        messages=[rows.message_row(task_id, OWNER, message, now)],
        events=rows.event_rows(task_id, first, now),
    )
