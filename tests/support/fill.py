"""Fill a database fast with tasks as the server would have stored them (bulk inserts, not the API): a task
row, its history, event log, folded artifact, webhook with outbox rows, Idempotency-Key, usage row and its
counters, each in the shape the server writes, so that reads, ListTasks and retention see real data."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol.events import ArtifactUpdate, EventRecord, StatusUpdate
from app.protocol.model import (
    Artifact,
    Message,
    Part,
    Role,
    StateTransition,
    Task,
    TaskState,
    TaskStatus,
    iso,
    new_id,
    utcnow,
)
from app.store import rows, tables

CHUNK = 1000
TABLES = (
    "tasks",
    "messages",
    "events",
    "artifacts",
    "push_configs",
    "push_outbox",
    "idempotency_keys",
    "task_usage",
)
"""The tables that hold a task's rows (`task_usage` outlives the task)."""


@dataclass(slots=True)
class Spec:
    """What each filled task looks like."""

    owner: str = "anonymous"
    state: TaskState = TaskState.COMPLETED
    at: datetime | None = None
    """The time of its last status (default: now)."""
    contexts: int = 0
    """Spread over this many contexts (named by `tag`); 0: a context per task."""
    tag: str = "fill"
    events: int = 4
    """Events in its log (at least 2: submitted, then its state; artifact chunks in between)."""
    push: bool = True
    outbox: int = 2
    """Notifications still queued for its webhook."""
    idem: bool = True
    usage: bool = True
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    role: str = "default"


def per_task(spec: Spec, n: int = 1) -> Counter[str]:
    """The rows `n` tasks of `spec` have, per table (`task_counts` aside)."""
    one = Counter(
        {
            "tasks": 1,
            "messages": 2,
            "events": spec.events,
            "artifacts": 1 if spec.events > 2 else 0,
            "push_configs": int(spec.push),
            "push_outbox": spec.outbox if spec.push else 0,
            "idempotency_keys": int(spec.idem),
            "task_usage": int(spec.usage),
        }
    )
    return Counter({t: k * n for t, k in one.items()})


def _task_rows(spec: Spec, i: int, at: datetime) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    task_id = new_id()
    context_id = f"{spec.tag}-ctx-{i % spec.contexts if spec.contexts else i}"
    created = at - timedelta(minutes=1)
    user = Message(new_id(), Role.USER, [Part(text=f"{spec.tag} task {i}")], context_id, task_id)
    reply = Message(new_id(), Role.AGENT, [Part(text=f"done {i}")], context_id, task_id)
    first = TaskStatus(TaskState.SUBMITTED, iso(created))
    last = TaskStatus(spec.state, iso(at), reply)
    records = [EventRecord(1, StatusUpdate(task_id, context_id, first))]
    artifact = Artifact("response", [Part(text="")])
    for seq in range(2, spec.events):
        chunk = Artifact("response", [Part(text=f"chunk {seq} ")])
        artifact.parts[0].text = (artifact.parts[0].text or "") + f"chunk {seq} "
        records.append(EventRecord(seq, ArtifactUpdate(task_id, context_id, chunk, append=seq > 2)))
    records.append(
        EventRecord(spec.events, StatusUpdate(task_id, context_id, last, final=spec.state.terminal))
    )
    task = Task(
        task_id,
        context_id,
        last,
        [user],
        transitions=[
            StateTransition(TaskState.SUBMITTED, first.timestamp),
            StateTransition(spec.state, last.timestamp),
        ],
    )
    row = rows.new_task(task, spec.owner, created, spec.lease_owner, spec.lease_expires_at, None, spec.role)
    row.update(
        state=spec.state.value,
        status=last.to_store(),
        last_seq=spec.events,
        updated_at=at,
        status_at=last.timestamp,
    )
    out: dict[str, list[dict[str, Any]]] = {
        "tasks": [row],
        "messages": [rows.message_row(task_id, spec.owner, m, at) for m in (user, reply)],
        "events": rows.event_rows(task_id, records, at),
        "artifacts": (
            [
                {
                    "task_id": task_id,
                    "seq": 1,
                    "artifact_id": "response",
                    "append": False,
                    "body": artifact.to_store(),
                }
            ]
            if spec.events > 2
            else []
        ),
        "idempotency_keys": (
            [
                {
                    "owner": spec.owner,
                    "key": f"{spec.tag}-key-{i}-{task_id[:8]}",
                    "fingerprint": "f" * 64,
                    "task_id": task_id,
                    "reply": None,
                    "created_at": created,
                    # Live: the key purge of the send path must not be what removes them.
                    "expires_at": datetime.now(at.tzinfo) + timedelta(days=2),
                }
            ]
            if spec.idem
            else []
        ),
        "task_usage": (
            [
                {
                    "task_id": task_id,
                    "seq": spec.events,
                    "model": "m",
                    "owner": spec.owner,
                    "context_id": context_id,
                    "role": spec.role,
                    "day": at.date().isoformat(),
                    "created_at": at,
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "cache_read_tokens": 0,
                    "cache_write_tokens": 0,
                    "cost_usd": 0.01,
                    "cost_source": "reported",
                    "wall_ms": 100,
                    "turns": 1,
                    "tool_calls": 0,
                    "reports": 1,
                }
            ]
            if spec.usage
            else []
        ),
    }
    return task_id, out


_TABLES = {
    t.name: t
    for t in (
        tables.tasks,
        tables.messages,
        tables.events,
        tables.artifacts,
        tables.idempotency_keys,
        tables.task_usage,
    )
}


async def fill(engine: AsyncEngine, n: int, spec: Spec) -> list[str]:
    """Insert `n` tasks of `spec` (with their counters, as the writer keeps them); their ids."""
    at = spec.at or utcnow()
    ids: list[str] = []
    for start in range(0, n, CHUNK):
        batch: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
        for i in range(start, min(n, start + CHUNK)):
            task_id, made = _task_rows(spec, i, at)
            ids.append(task_id)
            for table, got in made.items():
                batch[table].extend(got)
        counts: Counter[tuple[str, str]] = Counter()
        for row in batch["tasks"]:
            counts[(row["owner"], "")] += 1
            counts[(row["owner"], row["context_id"])] += 1
        async with engine.begin() as conn:
            for name, table in _TABLES.items():
                if batch[name]:
                    await conn.execute(insert(table), batch[name])
            if spec.push:
                hooks = [
                    {
                        "task_id": r["id"],
                        "config_id": "hook",
                        "owner": spec.owner,
                        "version": "1.0",
                        "url": "https://hooks.example/never",
                        "token": None,
                        "auth_scheme": None,
                        "auth_credentials": None,
                        "created_at": at,
                    }
                    for r in batch["tasks"]
                ]
                configs = tables.push_configs
                pks = (await conn.execute(insert(configs).returning(configs.c.pk), hooks)).scalars().all()
                outbox = [
                    {"config_pk": pk, "seq": seq, "history_len": 1, "attempts": 0, "created_at": at}
                    for pk in pks
                    for seq in range(1, spec.outbox + 1)
                ]
                if outbox:
                    await conn.execute(insert(tables.push_outbox), outbox)
            dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
            upsert = dialect.insert(tables.task_counts)
            upsert = upsert.on_conflict_do_update(
                index_elements=["owner", "context_id", "shard"],
                set_={"n": tables.task_counts.c.n + upsert.excluded.n},
            )
            await conn.execute(
                upsert,
                [{"owner": o, "context_id": c, "shard": 0, "n": k} for (o, c), k in sorted(counts.items())],
            )
    return ids


async def table_counts(engine) -> Counter[str]:
    out: Counter[str] = Counter()
    async with engine.connect() as conn:
        for table in TABLES:
            out[table] = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
    return out


async def rows_of(engine, ids: list[str]) -> Counter[str]:
    """Rows left in each table for these tasks."""
    out: Counter[str] = Counter()
    async with engine.connect() as conn:
        for table in TABLES:
            key = "id" if table == "tasks" else "task_id"
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ", ".join(f":i{n}" for n in range(len(chunk)))
                params = {f"i{n}": v for n, v in enumerate(chunk)}
                if table == "push_outbox":
                    query = (
                        "SELECT count(*) FROM push_outbox o JOIN push_configs c ON c.pk = o.config_pk "
                        f"WHERE c.task_id IN ({marks})"
                    )
                else:
                    query = f"SELECT count(*) FROM {table} WHERE {key} IN ({marks})"
                out[table] += (await conn.execute(text(query), params)).scalar_one()
    return out


async def counters_match_tasks(engine) -> None:
    """Every owner's and context's counter sums to its tasks, and no counter row is left at zero."""
    counts, tasks = tables.task_counts.c, tables.tasks.c
    async with engine.connect() as conn:
        counted = {
            (o, c): n
            for o, c, n in (
                await conn.execute(
                    select(counts.owner, counts.context_id, func.sum(counts.n)).group_by(
                        counts.owner, counts.context_id
                    )
                )
            ).all()
        }
        real: Counter[tuple[str, str]] = Counter()
        for o, c, n in (
            await conn.execute(
                select(tasks.owner, tasks.context_id, func.count()).group_by(tasks.owner, tasks.context_id)
            )
        ).all():
            real[(o, c)] += n
            real[(o, "")] += n
        zeros = (await conn.execute(select(func.count()).where(counts.n == 0))).scalar_one()
    assert {k: v for k, v in counted.items() if v} == dict(real)
    assert set(counted) == set(real)
    assert zeros == 0


async def orphans(engine) -> Counter[str]:
    """Rows of tasks that are no longer there, per table (`task_usage` aside: it outlives its task)."""
    out: Counter[str] = Counter()
    async with engine.connect() as conn:
        for table in TABLES:
            if table in ("tasks", "task_usage"):
                continue
            if table == "push_outbox":
                query = (
                    "SELECT count(*) FROM push_outbox WHERE config_pk NOT IN (SELECT pk FROM push_configs)"
                )
            else:
                query = f"SELECT count(*) FROM {table} WHERE task_id NOT IN (SELECT id FROM tasks)"
            out[table] = (await conn.execute(text(query))).scalar_one()
    return +out
