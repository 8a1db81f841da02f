"""Reads: tasks with their history and artifacts, pages of tasks, the running task a retried message
started, events after a cursor. A task's artifacts are folded from its append-only chunks up to the
task's own `last_seq`, so a read never shows an artifact ahead of the status it was read with."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, select, tuple_
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.protocol.model import (
    Artifact,
    ArtifactUpdate,
    EventRecord,
    Message,
    StateTransition,
    Task,
    TaskState,
    TaskStatus,
    event_from_store,
    fold_artifact,
    parse_iso,
)

from .models import ArtifactRow, EventRow, MessageRow, PushConfigRow, TaskRow

_tasks = TaskRow.__table__


@dataclass(slots=True)
class StoredTask:
    task: Task
    owner: str
    last_seq: int
    push: bool = False
    """Whether the task has webhooks (its events then go to the push outbox too)."""


@dataclass(slots=True)
class TaskPage:
    tasks: list[Task]
    next_token: str
    total: int


class InvalidPageToken(ValueError):
    """The page token was not issued by this server."""


def _token(row: Row[Any]) -> str:
    return base64.urlsafe_b64encode(f"{row.status_at}|{row.id}".encode()).decode()


def _untoken(token: str) -> tuple[str, str]:
    try:
        ts, task_id = base64.urlsafe_b64decode(token.encode()).decode().split("|", 1)
        parse_iso(ts)
        return ts, task_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPageToken(token) from exc


class Repository:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get_task(self, task_id: str, *, owner: str | None) -> StoredTask | None:
        """The task if `owner` owns it; `owner=None` only for the runner's own bookkeeping."""
        has_push = exists().where(PushConfigRow.task_id == _tasks.c.id).label("has_push")
        query = select(_tasks, has_push).where(_tasks.c.id == task_id)
        if owner is not None:
            query = query.where(_tasks.c.owner == owner)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return None
            tasks = await self._assemble(conn, [row], artifacts=True)
        return StoredTask(task=tasks[0], owner=row.owner, last_seq=row.last_seq, push=bool(row.has_push))

    async def list_tasks(
        self,
        owner: str,
        *,
        context_id: str | None,
        state: TaskState | None,
        after: str | None,
        page_size: int,
        page_token: str | None,
        artifacts: bool,
    ) -> TaskPage:
        """A page of the owner's tasks, newest status first, by keyset on (status_at, id)."""
        where = [_tasks.c.owner == owner]
        if context_id is not None:
            where.append(_tasks.c.context_id == context_id)
        if state is not None:
            where.append(_tasks.c.state == state.value)
        if after is not None:
            where.append(_tasks.c.status_at >= after)
        page = select(_tasks).where(*where)
        if page_token:
            ts, tid = _untoken(page_token)
            page = page.where(tuple_(_tasks.c.status_at, _tasks.c.id) < tuple_(ts, tid))
        page = page.order_by(_tasks.c.status_at.desc(), _tasks.c.id.desc()).limit(page_size + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(page)).all()
            total = (await conn.execute(select(func.count()).select_from(_tasks).where(*where))).scalar_one()
            more = len(rows) > page_size
            rows = rows[:page_size]
            tasks = await self._assemble(conn, rows, artifacts=artifacts)
        return TaskPage(tasks=tasks, next_token=_token(rows[-1]) if more else "", total=total)

    async def _assemble(self, conn: AsyncConnection, rows: Sequence[Row[Any]], artifacts: bool) -> list[Task]:
        """Tasks from their rows, with history and (optionally) artifacts, in two queries for all."""
        ids = [r.id for r in rows]
        history: dict[str, list[Message]] = defaultdict(list)
        if ids:
            for tid, body in await conn.execute(
                select(MessageRow.task_id, MessageRow.body)
                .where(MessageRow.task_id.in_(ids))
                .order_by(MessageRow.id)
            ):
                history[tid].append(Message.from_store(body))
        folded: dict[str, list[Artifact]] = defaultdict(list)
        if ids and artifacts:
            limit = {r.id: r.last_seq for r in rows}
            ctx = {r.id: r.context_id for r in rows}
            for tid, seq, append, body in await conn.execute(
                select(ArtifactRow.task_id, ArtifactRow.seq, ArtifactRow.append, ArtifactRow.body)
                .where(ArtifactRow.task_id.in_(ids))
                .order_by(ArtifactRow.task_id, ArtifactRow.seq)
            ):
                if seq <= limit[tid]:
                    update = ArtifactUpdate(tid, ctx[tid], Artifact.from_store(body), append=append)
                    fold_artifact(folded[tid], update)
        return [
            Task(
                id=r.id,
                context_id=r.context_id,
                status=TaskStatus.from_store(r.status),
                history=history[r.id],
                artifacts=folded[r.id],
                metadata=r._mapping["metadata"],
                transitions=[StateTransition(TaskState(t["state"]), t["timestamp"]) for t in r.transitions],
            )
            for r in rows
        ]

    async def find_retry(self, owner: str, retry_key: str) -> str | None:
        """The owner's task still running the first message with this retry key (`TaskRow.retry_key`)."""
        query = select(_tasks.c.id).where(_tasks.c.owner == owner, _tasks.c.retry_key == retry_key)
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def context_taken(self, context_id: str, owner: str) -> bool:
        """Whether another principal already has tasks in this context."""
        query = select(_tasks.c.id).where(_tasks.c.context_id == context_id, _tasks.c.owner != owner).limit(1)
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def events_after(
        self, task_id: str, context_id: str, after: int, *, owner: str
    ) -> list[EventRecord]:
        """The owner's task's events after `after`; none for a task of someone else."""
        owned = select(_tasks.c.id).where(_tasks.c.id == task_id, _tasks.c.owner == owner)
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(EventRow.seq, EventRow.kind, EventRow.body)
                    .where(EventRow.task_id == task_id, EventRow.seq > after, EventRow.task_id.in_(owned))
                    .order_by(EventRow.seq)
                )
            ).all()
        return [
            EventRecord(seq, event_from_store(task_id, context_id, kind, body)) for seq, kind, body in rows
        ]
