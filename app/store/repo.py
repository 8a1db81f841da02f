"""Reads: a task with its history and artifacts, the idempotency lookup, events after a cursor."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

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
)

from .models import ArtifactRow, EventRow, MessageRow, TaskRow


@dataclass(slots=True)
class StoredTask:
    task: Task
    owner: str
    last_seq: int


class Repository:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get_task(self, task_id: str) -> StoredTask | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(TaskRow.__table__).where(TaskRow.id == task_id))).first()
            if row is None:
                return None
            bodies = (
                await conn.execute(
                    select(MessageRow.body).where(MessageRow.task_id == task_id).order_by(MessageRow.id)
                )
            ).scalars()
            history = [Message.from_store(b) for b in bodies]
            chunks = (
                await conn.execute(
                    select(ArtifactRow.append, ArtifactRow.body)
                    .where(ArtifactRow.task_id == task_id)
                    .order_by(ArtifactRow.seq)
                )
            ).all()
        artifacts: list[Artifact] = []
        for append, body in chunks:
            fold_artifact(
                artifacts,
                ArtifactUpdate(row.id, row.context_id, Artifact.from_store(body), append=append),
            )
        task = Task(
            id=row.id,
            context_id=row.context_id,
            status=TaskStatus.from_store(row.status),
            history=history,
            artifacts=artifacts,
            metadata=row._mapping["metadata"],
            transitions=[StateTransition(TaskState(t["state"]), t["timestamp"]) for t in row.transitions],
        )
        return StoredTask(task=task, owner=row.owner, last_seq=row.last_seq)

    async def find_message_task(self, owner: str, message_id: str) -> str | None:
        async with self._engine.connect() as conn:
            return (
                await conn.execute(
                    select(MessageRow.task_id).where(
                        MessageRow.owner == owner, MessageRow.message_id == message_id
                    )
                )
            ).scalar()

    async def events_after(self, task_id: str, context_id: str, after: int) -> list[EventRecord]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(EventRow.seq, EventRow.kind, EventRow.body)
                    .where(EventRow.task_id == task_id, EventRow.seq > after)
                    .order_by(EventRow.seq)
                )
            ).all()
        return [
            EventRecord(seq, event_from_store(task_id, context_id, kind, body)) for seq, kind, body in rows
        ]

    async def task_ids_in_states(self, states: Iterable[TaskState]) -> list[tuple[str, TaskState]]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(TaskRow.id, TaskRow.state)
                    .where(TaskRow.state.in_([s.value for s in states]))
                    .order_by(TaskRow.created_at)
                )
            ).all()
        return [(tid, TaskState(state)) for tid, state in rows]
