"""The Core tables of the ORM rows, named once: the stores build their bulk statements on tables (Core
inserts, updates by key, deletes), not on the mapped classes."""

from __future__ import annotations

from .models import (
    AgentInstanceRow,
    ArtifactRow,
    EventRow,
    IdempotencyKeyRow,
    MessageRow,
    PushConfigRow,
    PushOutboxRow,
    TaskCheckpointRow,
    TaskCountRow,
    TaskRow,
    TaskUsageRow,
)

tasks = TaskRow.__table__
task_counts = TaskCountRow.__table__
messages = MessageRow.__table__
artifacts = ArtifactRow.__table__
events = EventRow.__table__
push_configs = PushConfigRow.__table__
push_outbox = PushOutboxRow.__table__
idempotency_keys = IdempotencyKeyRow.__table__
agent_instances = AgentInstanceRow.__table__
task_usage = TaskUsageRow.__table__
task_checkpoints = TaskCheckpointRow.__table__
