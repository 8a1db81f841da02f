"""The console's reads: every role's tasks in one list, filtered, a page at a time; one task with its role;
a task's place in its task tree (agents calling agents: the tasks above it and the tasks it started).

The task API sees one role's tasks at that role's endpoints; a person watching a team wants them together.
These reads cross roles, never owners: `owner=None` (all owners) is only for the principals the edge lets
see everything (`CONSOLE_ADMINS`).

A page is the keyset ListTasks uses, newest status first on `(status_at, id)`, by the owner's index (or
`ix_tasks_status_at` for all owners). Filters the index does not serve (role, state, text) look at a bounded
window of that order (`WINDOW` rows): a page never reads more than that, whatever the store holds, and a
sparse filter answers a short page with a cursor to go on from.

A tree is read by `parent_task_id` under the task's owner (a run's children are its principal's), on the
index `(owner, parent_task_id)`, a level at a time: at most `TREE_LEVELS` levels up and down and
`TREE_TASKS` tasks below, whatever the store holds.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import ColumnElement, Row, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.model import TaskState, iso, parse_iso

from .repo import Repository, StoredTask
from .tables import tasks as _tasks

WINDOW = 2_000
"""Most rows one page looks at under a filter its index does not serve."""
TREE_TASKS = 200
"""Most tasks below a task that its tree read returns (`TaskTree.cut` says when more were left out)."""
TREE_LEVELS = 16
"""Most levels a tree read walks up or down (`AGENT_CALL_DEPTH` keeps a real tree far shallower)."""


@dataclass(slots=True)
class TaskLine:
    """One task in the console's list: its row, without history or artifacts."""

    id: str
    context_id: str
    owner: str
    role: str
    state: str
    status_at: str
    created_at: str
    title: str | None
    metadata: dict[str, Any] | None
    parent_task_id: str | None


@dataclass(slots=True)
class TreeNode:
    """A task below the one asked about, with the tasks it started in turn (oldest first)."""

    line: TaskLine
    children: list[TreeNode]


@dataclass(slots=True)
class TaskTree:
    """Where a task stands in its tree."""

    ancestors: list[TaskLine]
    """From the tree's root down to the task's parent ([] for a task a client started); shorter when one
    was pruned (retention) or the walk reached `TREE_LEVELS`."""
    children: list[TreeNode]
    """The tasks its run started, and theirs, oldest first."""
    cut: bool
    """More tasks lay below than `TREE_TASKS` or `TREE_LEVELS` let the read return."""


@dataclass(slots=True)
class Filters:
    owner: str | None
    """None: every owner's tasks (an admin's view)."""
    state: TaskState | None = None
    role: str | None = None
    context_id: str | None = None
    text: str | None = None
    """Matched, case-blind, against the title, the task id and the context id."""
    changed_after: str | None = None
    """Only tasks whose status changed after this ISO time (the console's live refresh)."""


_LINE = tuple(_tasks.c[f.name] for f in fields(TaskLine))
"""The columns a listed task is read from: `TaskLine`'s fields."""


def _line(row: Row[Any]) -> TaskLine:
    """A listed task from its `_LINE` columns (`created_at` is stored as a time, listed as ISO text)."""
    return TaskLine(**{**row._mapping, "created_at": iso(row.created_at)})


@dataclass(slots=True)
class LinePage:
    lines: list[TaskLine]
    next_cursor: str
    """'' at the end; else where the next page starts (a sparse filter may answer a short page with one)."""


class BadCursor(ValueError):
    """A cursor this server did not issue."""


def _cursor(status_at: str, task_id: str) -> str:
    return base64.urlsafe_b64encode(f"{status_at}|{task_id}".encode()).decode()


def _uncursor(cursor: str) -> tuple[str, str]:
    try:
        ts, task_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        parse_iso(ts)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadCursor(cursor) from exc
    return ts, task_id


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class Browse:
    def __init__(self, engine: AsyncEngine, window: int = WINDOW) -> None:
        self._engine = engine
        self._repo = Repository(engine)
        self._window = window

    async def page(self, filters: Filters, *, limit: int, cursor: str | None = None) -> LinePage:
        """A page of tasks, newest status first. BadCursor for a cursor not issued here."""
        keyed: list[ColumnElement[bool]] = []
        if filters.owner is not None:
            keyed.append(_tasks.c.owner == filters.owner)
            if filters.context_id is not None:
                keyed.append(_tasks.c.context_id == filters.context_id)
        if filters.changed_after is not None:
            keyed.append(_tasks.c.status_at > filters.changed_after)
        if cursor:
            keyed.append(tuple_(_tasks.c.status_at, _tasks.c.id) < tuple_(*_uncursor(cursor)))
        order = (_tasks.c.status_at.desc(), _tasks.c.id.desc())
        async with self._engine.connect() as conn:
            if not _loose(filters, _tasks.c):
                rows = (
                    await conn.execute(select(*_LINE).where(*keyed).order_by(*order).limit(limit + 1))
                ).all()
                more = len(rows) > limit
                rows = rows[:limit]
                last = rows[-1] if more else None
            else:
                window = select(*_LINE).where(*keyed).order_by(*order).limit(self._window).subquery()
                w = window.c
                matched = (
                    select(window)
                    .where(*_loose(filters, w))
                    .order_by(w.status_at.desc(), w.id.desc())
                    .limit(limit + 1)
                )
                rows = (await conn.execute(matched)).all()
                more = len(rows) > limit
                rows = rows[:limit]
                last = rows[-1] if more else None
                if (
                    not more
                    and (await conn.execute(select(func.count()).select_from(window))).scalar_one()
                    >= self._window
                ):
                    # The window ran out before the page filled: go on from its last row.
                    last = (
                        await conn.execute(
                            select(w.status_at, w.id).order_by(w.status_at.asc(), w.id.asc()).limit(1)
                        )
                    ).first()
        next_cursor = _cursor(last.status_at, last.id) if last is not None else ""
        return LinePage([_line(r) for r in rows], next_cursor)

    async def task(self, task_id: str, owner: str | None) -> tuple[StoredTask, str] | None:
        """The task with all its history and artifacts, and its role, if `owner` owns it (None: any)."""
        stored = await self._repo.get_task(task_id, owner=owner)
        if stored is None:
            return None
        async with self._engine.connect() as conn:
            role = (await conn.execute(select(_tasks.c.role).where(_tasks.c.id == task_id))).scalar()
        # Deleted in between (retention pruning it): not found, as it would be a moment later.
        return None if role is None else (stored, role)

    async def tree(self, task_id: str, owner: str | None) -> TaskTree | None:
        """The tasks above and below `task_id`, if `owner` owns it (None: any); None when it is not found.
        Every read is its owner's: a tree never crosses principals."""
        c = _tasks.c
        async with self._engine.connect() as conn:
            where = [c.id == task_id] if owner is None else [c.id == task_id, c.owner == owner]
            found = (await conn.execute(select(c.owner, c.parent_task_id).where(*where))).first()
            if found is None:
                return None
            owner_of, parent = found
            ancestors: list[TaskLine] = []
            seen = {task_id}
            while parent is not None and parent not in seen and len(ancestors) < TREE_LEVELS:
                seen.add(parent)
                row = (await conn.execute(select(*_LINE).where(c.id == parent, c.owner == owner_of))).first()
                if row is None:
                    break
                ancestors.append(_line(row))
                parent = row.parent_task_id
            ancestors.reverse()
            nodes: dict[str, TreeNode] = {}
            roots: list[TreeNode] = []
            level = [task_id]
            cut = False
            for _ in range(TREE_LEVELS):
                room = TREE_TASKS - len(nodes)
                rows = (
                    await conn.execute(
                        select(*_LINE)
                        .where(c.owner == owner_of, c.parent_task_id.in_(level))
                        .order_by(c.created_at, c.id)
                        .limit(room + 1)
                    )
                ).all()
                if len(rows) > room:
                    rows, cut = rows[:room], True
                level = []
                for row in rows:
                    if row.id in seen or row.id in nodes:
                        continue
                    node = TreeNode(_line(row), [])
                    nodes[row.id] = node
                    above = nodes.get(row.parent_task_id)
                    (above.children if above is not None else roots).append(node)
                    level.append(row.id)
                if not level or cut:
                    break
            else:
                cut = bool(
                    level
                    and (
                        await conn.execute(
                            select(c.id).where(c.owner == owner_of, c.parent_task_id.in_(level)).limit(1)
                        )
                    ).first()
                )
        return TaskTree(ancestors, roots, cut)


def _loose(filters: Filters, c: Any) -> list[ColumnElement[bool]]:
    """The filters no index serves, on the columns `c` (the table's, or a window's over them)."""
    where: list[ColumnElement[bool]] = []
    if filters.owner is None and filters.context_id is not None:
        where.append(c.context_id == filters.context_id)
    if filters.state is not None:
        where.append(c.state == filters.state.value)
    if filters.role is not None:
        where.append(c.role == filters.role)
    if filters.text:
        pattern = _like(filters.text)
        where.append(
            or_(
                func.lower(func.coalesce(c.title, "")).like(pattern, escape="\\"),
                func.lower(c.id).like(pattern, escape="\\"),
                func.lower(c.context_id).like(pattern, escape="\\"),
            )
        )
    return where
