"""The rows one step of one task adds or changes (`Write`): built by the tasks room, committed by the writer.

A leaf: it imports nothing of the app, so the writer (`writer.py`), its one-statement path (`steps.py`) and
the builders of writes (`tasks/step.py`) all import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RUNNING = frozenset({"submitted", "working"})
"""The stored states of a running task: its first message's retry key is kept only in these."""


@dataclass(slots=True)
class Write:
    """The rows one step of one task adds or changes."""

    new_task: dict[str, Any] | None = None
    task_update: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    push_configs: list[dict[str, Any]] = field(default_factory=list)
    """New webhooks (inline in a send), inserted before the notifications."""
    notifications: list[dict[str, Any]] = field(default_factory=list)
    """Per event: `task_id`, `seq`, `history_len`, `created_at` (see `app.push.payloads`)."""
    folded_artifacts: list[dict[str, Any]] | None = None
    """Set when the task ends: its artifact rows are replaced by these, one folded row per artifact."""
    idempotency_key: dict[str, Any] | None = None
    """The caller's Idempotency-Key row, stored with what its request made (after the task it names)."""
    usage: list[dict[str, Any]] = field(default_factory=list)
    """`task_usage` rows of the usage reports the step's events carry."""
    task_metadata: dict[str, Any] | None = None
    """The task's new metadata (its usage summed), when the step changes it: `{"_id", "_metadata"}`."""
    trace: Any = None
    """The span the write was made in (tracing on): its batch's span hangs off the first, links the rest."""

    def then(self, later: Write) -> Write:
        """This write and `later` (the next step of the same task) as one: a new task's creation with its
        run's first step, committed together. The task row is inserted as the step leaves it (one
        statement, not an insert and an update); its retry key only while it still runs, as an update
        would have left it."""
        new_task = self.new_task or later.new_task
        task_update = later.task_update or self.task_update
        task_metadata = later.task_metadata or self.task_metadata
        if new_task is not None and task_update is not None and task_update["_id"] == new_task["id"]:
            new_task = {**new_task, **{k: v for k, v in task_update.items() if k != "_id"}}
            if new_task["state"] not in RUNNING:
                new_task["retry_key"] = None
            if task_metadata is not None:
                new_task["metadata"] = task_metadata["_metadata"]
            task_update = task_metadata = None
        return Write(
            new_task=new_task,
            task_update=task_update,
            messages=self.messages + later.messages,
            events=self.events + later.events,
            artifacts=self.artifacts + later.artifacts,
            push_configs=self.push_configs + later.push_configs,
            notifications=self.notifications + later.notifications,
            folded_artifacts=later.folded_artifacts,
            idempotency_key=self.idempotency_key or later.idempotency_key,
            usage=self.usage + later.usage,
            task_metadata=task_metadata,
        )
