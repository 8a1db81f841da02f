"""Retention: an index on `idempotency_keys.task_id`, so deleting old tasks finds their keys by index.

Revision ID: 0012_retention
Revises: 0011_console
Create Date: 2026-11-30

Retention (`TASK_RETENTION_DAYS`, `a2a-server prune`) deletes ended tasks with everything that hangs off
them; every other table a task owns is keyed or indexed by `task_id` already, but a task's Idempotency-Keys
were found only by their own key, so each deleted task (and each cascade from `tasks`) scanned the table.
An addition: the release before this one neither reads nor needs it.
"""

from __future__ import annotations

from alembic import op

revision = "0012_retention"
down_revision = "0011_console"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_task_id", "idempotency_keys", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_task_id", table_name="idempotency_keys")
