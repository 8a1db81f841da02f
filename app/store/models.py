"""Tables: tasks, messages (history), artifacts (append-only chunks), the event log, push webhooks
with their delivery outbox, the callers' Idempotency-Keys, the agent instances live for discovery, and
what the agents' runs used (`task_usage`), and each coding task's last checkpoint (`task_checkpoints`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.protocol.model import TERMINAL_STATES

JsonType = JSON().with_variant(JSONB(), "postgresql")
BigId = BigInteger().with_variant(Integer(), "sqlite")
Timestamp = DateTime(timezone=True)


RETRY_KEY_UNIQUE = "uq_tasks_owner_retry_key"
"""A second running task of one first message (per owner): a copy of a request."""
OPEN_CONTEXT_UNIQUE = "uq_tasks_open_context"
"""A second open task in one context of an agent with effects (`TaskRow.exclusive`)."""
IDEMPOTENCY_KEY_PKEY = "idempotency_keys_pkey"
"""An Idempotency-Key in use: a copy of a request."""
EVENT_SEQ_PKEY = "events_pkey"
ARTIFACT_SEQ_PKEY = "artifacts_pkey"
"""An event number (and its artifact chunk) already written: another replica has taken the task over.
The primary keys carry PostgreSQL's default names, which the migrations left them."""


ENDED_STATES = tuple(s.value for s in TERMINAL_STATES)
"""A task's stored `state` once it has ended (what leases pass over and retention deletes)."""
OPEN_EXCLUSIVE = text(f"exclusive AND state NOT IN ({', '.join(repr(s) for s in sorted(ENDED_STATES))})")
"""The rows `OPEN_CONTEXT_UNIQUE` covers: open tasks of agents with effects (the migration says the same)."""


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JsonType, list[Any]: JsonType, datetime: Timestamp}


class TaskRow(Base):
    """A task's current status; history, artifacts and events hang off it."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    context_id: Mapped[str] = mapped_column(String(256))
    """Contexts are per principal: (owner, context_id) names one; another owner's same id is another."""
    owner: Mapped[str] = mapped_column(String(256))
    state: Mapped[str] = mapped_column(String(32))
    status: Mapped[dict[str, Any]]
    transitions: Mapped[list[Any]]
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata")
    last_seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    status_at: Mapped[str] = mapped_column(String(32))
    """The current status's timestamp (ISO-8601 UTC, fixed width, so it sorts as text): ListTasks' order."""
    lease_owner: Mapped[str | None] = mapped_column(String(256))
    """The replica that may write this task (runs its agent); NULL: nobody, queued or idle."""
    lease_expires_at: Mapped[datetime | None]
    lease_suspect_at: Mapped[datetime | None]
    """When a reaper first saw the lease expired (the database answering); any renewal or commit by the
    holder clears it. The task is ended as lost only a lease TTL after this mark (`leases.py`)."""
    role: Mapped[str] = mapped_column(String(40), server_default="default")
    """The role (agent) the task was sent to: only that role's endpoints see it, only its runners claim it."""
    title: Mapped[str | None] = mapped_column(String(200))
    """The first message's text, cut to `TITLE_CHARS`: what the console lists and searches (NULL: none)."""
    traceparent: Mapped[str | None] = mapped_column(String(64))
    """The W3C `traceparent` of the request that created the task (tracing on; else NULL): its runs, on any
    replica or worker, and its webhook calls continue that trace. Never shown to clients."""
    run_started_at: Mapped[datetime | None]
    """When the run of this `submitted` task was started, written with the claim or creation it started
    from (not for a `pure` agent's): a holder that dies before the run's first event leaves a task that is
    ended as lost, never run again (`leases.py`). NULL: no run was started, or one that may run again."""
    exclusive: Mapped[bool] = mapped_column(Boolean, server_default=false())
    """The task's agent has effects (not `pure`: a CLI in the context's workspace, its session): while the
    task is open (not ended) it is the only open task of its context, per owner and role
    (`OPEN_CONTEXT_UNIQUE`). False for a pure agent's tasks, which may run side by side."""
    parent_task_id: Mapped[str | None] = mapped_column(String(64))
    """The task whose run started this one (`metadata.parentTaskId`, set by the server alone at creation):
    that run reads, answers and cancels only its own children. NULL: a client started it."""
    retry_key: Mapped[str | None] = mapped_column(String(64))
    """While the task is `submitted` or `working`: the hash of the message that started it (messageId,
    parts, taskId/contextId as sent), so a retry of that message attaches instead of starting another;
    cleared when the task first stops. Unique per owner: of two concurrent copies, only one is stored."""

    __table_args__ = (
        Index("ix_tasks_owner_updated", "owner", "updated_at"),
        Index("ix_tasks_state", "state"),
        Index("ix_tasks_state_created", "state", "created_at"),
        Index("ix_tasks_lease_owner", "lease_owner"),
        Index("ix_tasks_owner_status_at", "owner", "status_at", "id"),
        Index("ix_tasks_owner_context_status_at", "owner", "context_id", "status_at", "id"),
        Index("ix_tasks_status_at", "status_at", "id"),
        Index("ix_tasks_owner_parent", "owner", "parent_task_id"),
        Index(RETRY_KEY_UNIQUE, "owner", "retry_key", unique=True),
        Index(
            OPEN_CONTEXT_UNIQUE,
            "owner",
            "role",
            "context_id",
            unique=True,
            postgresql_where=OPEN_EXCLUSIVE,
            sqlite_where=OPEN_EXCLUSIVE,
        ),
    )


class TaskCountRow(Base):
    """How many tasks an owner has (`context_id` ''), and has in each context: ListTasks' totalSize
    without counting rows. Kept in the writer's transaction that inserts the tasks; each flusher adds to
    its own `shard` so concurrent commits of one owner do not queue on one row."""

    __tablename__ = "task_counts"

    owner: Mapped[str] = mapped_column(String(256), primary_key=True)
    context_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigId)


class MessageRow(Base):
    """One message of a task's history (a messageId may recur: a reused id is a new message)."""

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(256))
    message_id: Mapped[str] = mapped_column(String(256))
    role: Mapped[str] = mapped_column(String(16))
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_messages_task_id_id", "task_id", "id"),)
    """(task_id, id) serves a task's last N messages (historyLength) without reading the rest."""


class ArtifactRow(Base):
    """One artifact-update as it arrived: folded in seq order, the rows give the task's artifacts.

    Append-only while the task runs, so that a long stream of chunks costs one small insert each, never a
    rewrite. When the task ends, its rows are replaced by one folded row per artifact (`append` false,
    `seq` 1..n in artifact order), so reading a finished task never replays chunks; the event log keeps
    every chunk for streams.
    """

    __tablename__ = "artifacts"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    artifact_id: Mapped[str] = mapped_column(String(256))
    append: Mapped[bool] = mapped_column(Boolean)
    body: Mapped[dict[str, Any]]

    __table_args__ = (PrimaryKeyConstraint("task_id", "seq", name=ARTIFACT_SEQ_PKEY),)


class EventRow(Base):
    """The append-only event log: every status and artifact update, numbered per task."""

    __tablename__ = "events"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]

    __table_args__ = (PrimaryKeyConstraint("task_id", "seq", name=EVENT_SEQ_PKEY),)


class PushConfigRow(Base):
    """A webhook of a task, in the protocol version it was registered with, and its delivery state.

    `claimed_by`/`claim_expires_at` say which replica is delivering its queue (one at a time, in order);
    `retry_at` holds the queue back while its head waits for a retry.
    """

    __tablename__ = "push_configs"

    pk: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    config_id: Mapped[str] = mapped_column(String(256))
    owner: Mapped[str] = mapped_column(String(256))
    version: Mapped[str] = mapped_column(String(8))
    url: Mapped[str] = mapped_column(String(2048))
    token: Mapped[str | None] = mapped_column(String(1024))
    auth_scheme: Mapped[str | None] = mapped_column(String(64))
    auth_credentials: Mapped[str | None] = mapped_column(String(4096))
    created_at: Mapped[datetime]
    retry_at: Mapped[datetime | None]
    claimed_by: Mapped[str | None] = mapped_column(String(256))
    claim_expires_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    delivered: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_outcome: Mapped[str | None] = mapped_column(String(512))
    last_attempt_at: Mapped[datetime | None]
    last_delivered_at: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("task_id", "config_id", name="uq_push_configs_task_config"),
        Index("ix_push_configs_claimed_by", "claimed_by"),
    )


class PushOutboxRow(Base):
    """One notification waiting for delivery: written in the transaction of the event it is about.

    A pointer, not a payload: the body is built at delivery from the event log (`app.push.payloads`);
    `history_len` is how many messages the task's history had at event `seq`. `body` is only set on rows
    queued before revision 0005, which carried their body.
    """

    __tablename__ = "push_outbox"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    config_pk: Mapped[int] = mapped_column(ForeignKey("push_configs.pk", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict[str, Any] | None]
    history_len: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_push_outbox_config_seq", "config_pk", "seq"),)


class IdempotencyKeyRow(Base):
    """A caller's `Idempotency-Key` and what its first request made: a task, or the agent's direct reply.

    `fingerprint` hashes the request, so the key sent again with another request is refused. Written in the
    same transaction as the task it names: of two concurrent first uses, the primary key lets one win.
    """

    __tablename__ = "idempotency_keys"

    owner: Mapped[str] = mapped_column(String(256))
    key: Mapped[str] = mapped_column(String(256))
    fingerprint: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    """The task the key's request made (None: a direct reply); indexed for retention's deletes."""
    reply: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)

    __table_args__ = (PrimaryKeyConstraint("owner", "key", name=IDEMPOTENCY_KEY_PKEY),)


class AgentInstanceRow(Base):
    """One process's instance of a role, for discovery (`GET /agents`): refreshed every heartbeat, hidden
    once `last_seen` is older than the maximum age, deleted (a replica) or marked left (a worker) on a clean
    shutdown, deleted lazily once long stale."""

    __tablename__ = "agent_instances"

    name: Mapped[str] = mapped_column(String(512), primary_key=True)
    """`role:instance_id`: the discovery identity. Routing is by `role` only."""
    role: Mapped[str] = mapped_column(String(40))
    instance_id: Mapped[str] = mapped_column(String(256))
    """The process: a replica's REPLICA_ID, or a remote worker's id."""
    kind: Mapped[str] = mapped_column(String(16))
    """`replica` or `worker`."""
    description: Mapped[str] = mapped_column(String(2048))
    card_url: Mapped[str] = mapped_column(String(2048))
    capabilities: Mapped[dict[str, Any]]
    slots: Mapped[int] = mapped_column(Integer)
    running: Mapped[int] = mapped_column(Integer)
    """Agent runs of the role at the last heartbeat."""
    last_seen: Mapped[datetime]
    started_at: Mapped[datetime]
    left_at: Mapped[datetime | None]
    """When a remote worker said it is leaving: hidden from then on, and its late calls (a claim sent before
    it left, handled after) do not bring it back; its next life's first call (`whoami`) does."""

    __table_args__ = (Index("ix_agent_instances_last_seen", "last_seen"),)
    """Listing the live ones and deleting the long stale ones both look by `last_seen`."""


class TaskUsageRow(Base):
    """What one usage report of a run said of one model (`app/protocol/usage.py`): written with the event
    that carries the report, in its transaction, so a report is recorded exactly once.

    A report naming several models has a row per model; the run's own figures (`wall_ms`, `turns`,
    `tool_calls`) and `reports` (1) are on its first row only, so sums over rows count each once. A report
    naming no model is one row with model ''. Rows outlive their task (no foreign key): they are the account
    of what was used. `day` is the report's UTC date (`YYYY-MM-DD`), what the read API sums by."""

    __tablename__ = "task_usage"

    task_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(Integer)
    """The number of the event that carried the report."""
    model: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str] = mapped_column(String(256))
    context_id: Mapped[str] = mapped_column(String(256))
    role: Mapped[str] = mapped_column(String(40))
    day: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime]
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    cost_source: Mapped[str | None] = mapped_column(String(16))
    wall_ms: Mapped[int] = mapped_column(BigInteger)
    turns: Mapped[int] = mapped_column(Integer)
    tool_calls: Mapped[int] = mapped_column(Integer)
    reports: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        PrimaryKeyConstraint("task_id", "seq", "model", name="task_usage_pkey"),
        Index("ix_task_usage_owner_day", "owner", "day"),
        Index("ix_task_usage_owner_context_day", "owner", "context_id", "day"),
        Index("ix_task_usage_day", "day"),
    )
    """One owner's sums read a range of (owner, day), a context's of (owner, context_id, day); an admin's
    sums over every owner a range of day."""


class TaskCheckpointRow(Base):
    """A task's last checkpoint (`store/run_checkpoints.py`): the archive its holder saved, whole, and its
    digest, so another holder can go on with the task when this one dies. One row per task, replaced in one
    statement; deleted with its task."""

    __tablename__ = "task_checkpoints"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    owner: Mapped[str] = mapped_column(String(256))
    """The task's owner: a checkpoint is read for its owner only."""
    holder: Mapped[str] = mapped_column(String(256))
    """Who saved it: a replica's id, or `worker:<principal>:<instance>`."""
    taken_at: Mapped[datetime]
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    manifest: Mapped[dict[str, Any]]
    data: Mapped[bytes] = mapped_column(LargeBinary)
