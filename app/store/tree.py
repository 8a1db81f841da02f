"""Reads of the task tree (agents calling agents): which role a task is on and whose child it is, and a
task's children that still run; and which roles a context's tasks wait for input on (what the root endpoints
route a message naming only its context by). Across roles, never across owners: a run's calls reach children
on any role, and every read names the owner (another principal's task is not found)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import TaskState

from .models import ENDED_STATES
from .tables import tasks as _tasks


@dataclass(frozen=True, slots=True)
class Node:
    """A task as the tree knows it: its role and its parent (None: a client started it)."""

    task_id: str
    role: str
    parent_task_id: str | None


class Tree:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def node(self, owner: str, task_id: str) -> Node | None:
        """The owner's task's place in the tree (None: no such task of this owner)."""
        query = select(_tasks.c.role, _tasks.c.parent_task_id).where(
            _tasks.c.id == task_id, _tasks.c.owner == owner
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else Node(task_id, row.role, row.parent_task_id)

    async def open_children(self, owner: str, parent_task_id: str) -> list[Node]:
        """The owner's tasks `parent_task_id`'s runs started that have not ended (the index
        `(owner, parent_task_id)`)."""
        query = select(_tasks.c.id, _tasks.c.role).where(
            _tasks.c.owner == owner,
            _tasks.c.parent_task_id == parent_task_id,
            _tasks.c.state.not_in(ENDED_STATES),
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [Node(r.id, r.role, parent_task_id) for r in rows]

    async def waiting_roles(self, owner: str, context_id: str) -> list[str]:
        """The roles of the owner's tasks waiting for input in the context, each once."""
        query = (
            select(_tasks.c.role)
            .where(
                _tasks.c.owner == owner,
                _tasks.c.context_id == context_id,
                _tasks.c.state == TaskState.INPUT_REQUIRED.value,
            )
            .distinct()
        )
        async with self._engine.connect() as conn:
            return sorted((await conn.scalars(query)).all())
