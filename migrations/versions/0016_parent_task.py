"""Agents that call agents: `tasks.parent_task_id`, the task whose run started this one.

Revision ID: 0016_parent_task
Revises: 0015_open_context
Create Date: 2026-11-28

A task a run started through its calls (`send_to_agent`) records its parent, so the parent's run reads,
answers and cancels only its own children, and a canceled or ended parent cancels those still running.
The index `(owner, parent_task_id)` finds a parent's children. Every task before it has no parent (NULL).
An addition: the release before this one neither reads nor writes the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_parent_task"
down_revision = "0015_open_context"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Not a batch: on SQLite a batch copies the table, and dropping the old one cascades to its rows' events.
    op.add_column("tasks", sa.Column("parent_task_id", sa.String(64), nullable=True))
    op.create_index("ix_tasks_owner_parent", "tasks", ["owner", "parent_task_id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_owner_parent", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("parent_task_id")
