"""Reads: tasks with their history and artifacts, pages of tasks, the running task a retried message
started, events after a cursor. A task's artifacts are folded from its append-only chunks up to the
task's own `last_seq`, so a read never shows an artifact ahead of the status it was read with (a finished
task's are stored folded).

Every read costs what it returns, not what is stored: history limits are applied in SQL, a page's
totalSize comes from the counters the writer keeps (or, under a state or time filter, is counted once, up to
`COUNT_CAP`, and carried in the page token), and a resume reads the task's row and the events after the
cursor only."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, exists, func, select, true, tuple_
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.protocol.events import ArtifactUpdate, EventRecord, event_from_store, fold_artifact
from app.protocol.model import Artifact, Message, StateTransition, Task, TaskState, TaskStatus, parse_iso

from .models import ENDED_STATES, ArtifactRow, EventRow, MessageRow, PushConfigRow, TaskCountRow
from .tables import tasks as _tasks

COUNT_CAP = 10_000
"""Most rows counted for the totalSize of a list filtered by state or time (no counter serves those)."""


@dataclass(slots=True)
class StoredTask:
    task: Task
    owner: str
    last_seq: int
    push: bool = False
    """Whether the task has webhooks (its events then go to the push outbox too)."""
    traceparent: str | None = None
    """The W3C trace context of the request that created it (tracing on): its runs continue that trace."""


@dataclass(slots=True)
class TaskHead:
    """A task's row without its history or artifacts: enough to follow its event log."""

    context_id: str
    state: TaskState
    last_seq: int


@dataclass(slots=True)
class TaskPage:
    tasks: list[Task]
    next_token: str
    total: int


class InvalidPageToken(ValueError):
    """The page token was not issued by this server."""


def _token(row: Row[Any], total: int | None) -> str:
    """The keyset position, and the filtered list's total counted on its first page."""
    text = f"{row.status_at}|{row.id}" + (f"|{total}" if total is not None else "")
    return base64.urlsafe_b64encode(text.encode()).decode()


def _untoken(token: str) -> tuple[str, str, int | None]:
    """(status_at, id, carried total); tokens from before the total was carried have none."""
    try:
        ts, rest = base64.urlsafe_b64decode(token.encode()).decode().split("|", 1)
        parse_iso(ts)
        head, sep, total = rest.rpartition("|")
        if sep and total.isdigit():
            return ts, head, int(total)
        return ts, rest, None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPageToken(token) from exc


class Repository:
    def __init__(self, engine: AsyncEngine, role: str | None = None) -> None:
        """With `role` (a deployment of several roles), every owner-scoped read sees only that role's tasks:
        another role's task id is "not found" here."""
        self._engine = engine
        self._role = role

    def _scoped(self, *where: ColumnElement[bool]) -> list[ColumnElement[bool]]:
        return [*where, _tasks.c.role == self._role] if self._role is not None else list(where)

    async def get_task(
        self, task_id: str, *, owner: str | None, history: int | None = None, to_write: bool = False
    ) -> StoredTask | None:
        """The task if `owner` owns it, with its last `history` messages (None: all); `owner=None` only
        for the runner's own bookkeeping. `to_write`: a finished task comes without history or artifacts
        (a writer only refuses it), so refusing a long one costs no more than a short one."""
        has_push = exists().where(PushConfigRow.task_id == _tasks.c.id).label("has_push")
        query = select(_tasks, has_push).where(_tasks.c.id == task_id)
        if owner is not None:
            query = query.where(*self._scoped(_tasks.c.owner == owner))
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return None
            bare = to_write and TaskState(row.state).terminal
            tasks = await self._assemble(conn, [row], artifacts=not bare, history=0 if bare else history)
        return StoredTask(
            task=tasks[0],
            owner=row.owner,
            last_seq=row.last_seq,
            push=bool(row.has_push),
            traceparent=row.traceparent,
        )

    async def webhooked(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these tasks have webhooks (for the runner's own bookkeeping: no owner check)."""
        if not task_ids:
            return set()
        query = select(PushConfigRow.task_id).where(PushConfigRow.task_id.in_(task_ids)).distinct()
        async with self._engine.connect() as conn:
            return set((await conn.scalars(query)).all())

    async def task_head(self, task_id: str, *, owner: str) -> TaskHead | None:
        """The owner's task's row only: one keyed lookup, whatever the task holds."""
        query = select(_tasks.c.context_id, _tasks.c.state, _tasks.c.last_seq).where(
            *self._scoped(_tasks.c.id == task_id, _tasks.c.owner == owner)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else TaskHead(row.context_id, TaskState(row.state), row.last_seq)

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
        history: int | None = None,
    ) -> TaskPage:
        """A page of the owner's tasks, newest status first, by keyset on (status_at, id).

        totalSize: the writer's counters for the owner or the context (current, so tasks created
        between pages count); under a state or time filter, counted on the first page, up to `COUNT_CAP`,
        and carried in the page token.
        """
        where = self._scoped(_tasks.c.owner == owner)
        if context_id is not None:
            where.append(_tasks.c.context_id == context_id)
        # '' is the counters' key for all the owner's tasks; no task has an empty contextId. The counters
        # are per owner and context, not per role: with roles, the total is counted as under a filter.
        counted = state is None and after is None and context_id != "" and self._role is None
        if state is not None:
            where.append(_tasks.c.state == state.value)
        if after is not None:
            where.append(_tasks.c.status_at >= after)
        page = select(_tasks).where(*where)
        carried = None
        if page_token:
            ts, tid, carried = _untoken(page_token)
            page = page.where(tuple_(_tasks.c.status_at, _tasks.c.id) < tuple_(ts, tid))
        page = page.order_by(_tasks.c.status_at.desc(), _tasks.c.id.desc()).limit(page_size + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(page)).all()
            if counted:
                total = (
                    await conn.execute(
                        select(func.coalesce(func.sum(TaskCountRow.n), 0)).where(
                            TaskCountRow.owner == owner, TaskCountRow.context_id == (context_id or "")
                        )
                    )
                ).scalar_one()
            elif carried is not None:
                total = carried
            else:
                capped = select(_tasks.c.id).where(*where).limit(COUNT_CAP).subquery()
                total = (await conn.execute(select(func.count()).select_from(capped))).scalar_one()
            more = len(rows) > page_size
            rows = rows[:page_size]
            tasks = await self._assemble(conn, rows, artifacts=artifacts, history=history)
        token = _token(rows[-1], None if counted else total) if more else ""
        return TaskPage(tasks=tasks, next_token=token, total=int(total))

    async def _assemble(
        self, conn: AsyncConnection, rows: Sequence[Row[Any]], artifacts: bool, history: int | None = None
    ) -> list[Task]:
        """Tasks from their rows, with their last `history` messages (None: all) and (optionally)
        artifacts, in two queries for all."""
        ids = [r.id for r in rows]
        messages: dict[str, list[Message]] = defaultdict(list)
        if ids and history != 0:
            for tid, body in await conn.execute(_history(ids, history, conn.dialect.name)):
                messages[tid].append(Message.from_store(body))
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
                history=messages[r.id],
                artifacts=folded[r.id],
                metadata=r._mapping["metadata"],
                transitions=[StateTransition(TaskState(t["state"]), t["timestamp"]) for t in r.transitions],
            )
            for r in rows
        ]

    async def find_retry(self, owner: str, retry_key: str) -> str | None:
        """The owner's task still running the first message with this retry key (`TaskRow.retry_key`)."""
        query = select(_tasks.c.id).where(
            *self._scoped(_tasks.c.owner == owner, _tasks.c.retry_key == retry_key)
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def open_in_context(self, owner: str, context_id: str) -> tuple[str, str, str | None] | None:
        """The open task of an agent with effects in the owner's context (id, state, retry key), if any."""
        query = select(_tasks.c.id, _tasks.c.state, _tasks.c.retry_key).where(
            *self._scoped(
                _tasks.c.owner == owner,
                _tasks.c.context_id == context_id,
                _tasks.c.exclusive.is_(True),
                _tasks.c.state.not_in(ENDED_STATES),
            )
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else (row[0], row[1], row[2])

    async def waiting_in_context(self, owner: str, context_id: str, limit: int) -> list[str]:
        """The ids of the owner's tasks waiting for input in the context, oldest status first, at most
        `limit`: what a message naming only the context answers."""
        query = (
            select(_tasks.c.id)
            .where(
                *self._scoped(
                    _tasks.c.owner == owner,
                    _tasks.c.context_id == context_id,
                    _tasks.c.state == TaskState.INPUT_REQUIRED.value,
                )
            )
            .order_by(_tasks.c.status_at, _tasks.c.id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return list((await conn.scalars(query)).all())

    async def task_taken(self, task_id: str) -> bool:
        """Whether any task, of any owner or role, has this id (a new task named by its client cannot)."""
        async with self._engine.connect() as conn:
            return (await conn.execute(select(_tasks.c.id).where(_tasks.c.id == task_id))).first() is not None

    async def first_message(self, owner: str, context_id: str) -> Message | None:
        """The first message stored in the owner's context (the one that opened it), None for a new one."""
        query = (
            select(MessageRow.body)
            .join(_tasks, _tasks.c.id == MessageRow.task_id)
            .where(*self._scoped(_tasks.c.owner == owner, _tasks.c.context_id == context_id))
            .order_by(MessageRow.id)
            .limit(1)
        )
        async with self._engine.connect() as conn:
            body = (await conn.execute(query)).scalar()
        return None if body is None else Message.from_store(body)

    async def events_after(
        self, task_id: str, context_id: str, after: int, *, owner: str, limit: int | None = None
    ) -> list[EventRecord]:
        """The owner's task's events after `after` (the first `limit` of them); none for a task of someone
        else."""
        owned = select(_tasks.c.id).where(*self._scoped(_tasks.c.id == task_id, _tasks.c.owner == owner))
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(EventRow.seq, EventRow.kind, EventRow.body)
                    .where(EventRow.task_id == task_id, EventRow.seq > after, EventRow.task_id.in_(owned))
                    .order_by(EventRow.seq)
                    .limit(limit)
                )
            ).all()
        return [
            EventRecord(seq, event_from_store(task_id, context_id, kind, body)) for seq, kind, body in rows
        ]


def _history(ids: list[str], limit: int | None, dialect: str) -> Any:
    """The tasks' messages in order; with `limit`, each task's last `limit` only, by the (task_id, id)
    index newest first."""
    if limit is None:
        return (
            select(MessageRow.task_id, MessageRow.body)
            .where(MessageRow.task_id.in_(ids))
            .order_by(MessageRow.task_id, MessageRow.id)
        )
    if len(ids) == 1:
        last = (
            select(MessageRow.id, MessageRow.task_id, MessageRow.body)
            .where(MessageRow.task_id == ids[0])
            .order_by(MessageRow.id.desc())
            .limit(limit)
            .subquery()
        )
        return select(last.c.task_id, last.c.body).order_by(last.c.id)
    if dialect == "postgresql":
        # One index range per task, newest first and cut at `limit`: the rest of a long history is never read.
        tid = func.unnest(postgresql.array(ids)).table_valued("tid").render_derived(name="t")
        last = (
            select(MessageRow.id, MessageRow.task_id, MessageRow.body)
            .where(MessageRow.task_id == tid.c.tid)
            .order_by(MessageRow.id.desc())
            .limit(limit)
            .lateral("last")
        )
        return (
            select(last.c.task_id, last.c.body)
            .select_from(tid)
            .join(last, true())
            .order_by(last.c.task_id, last.c.id)
        )
    # SQLite (the embedded default) has no LATERAL: number each task's messages, newest first.
    ranked = (
        select(
            MessageRow.id,
            MessageRow.task_id,
            MessageRow.body,
            func.row_number()
            .over(partition_by=MessageRow.task_id, order_by=MessageRow.id.desc())
            .label("rn"),
        )
        .where(MessageRow.task_id.in_(ids))
        .subquery()
    )
    return (
        select(ranked.c.task_id, ranked.c.body)
        .where(ranked.c.rn <= limit)
        .order_by(ranked.c.task_id, ranked.c.id)
    )
