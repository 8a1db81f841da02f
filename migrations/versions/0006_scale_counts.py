"""Cost that does not grow with the data: per-owner and per-context task counters (ListTasks' totalSize),
contexts keyed by owner, and a task's last messages by index.

Revision ID: 0006_scale_counts
Revises: 0006_idem
Create Date: 2026-11-26

Finished tasks' artifacts stored before this revision stay as chunks: reads fold them as before; tasks
that end from now on are stored folded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_scale_counts"
down_revision = "0006_idem"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_counts",
        sa.Column("owner", sa.String(256), primary_key=True),
        sa.Column("context_id", sa.String(256), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True),
        sa.Column("n", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    )
    op.execute(
        "INSERT INTO task_counts (owner, context_id, shard, n) "
        "SELECT owner, '', 0, count(*) FROM tasks GROUP BY owner"
    )
    op.execute(
        "INSERT INTO task_counts (owner, context_id, shard, n) "
        "SELECT owner, context_id, 0, count(*) FROM tasks GROUP BY owner, context_id"
    )
    op.create_index("ix_tasks_owner_context_status_at", "tasks", ["owner", "context_id", "status_at", "id"])
    op.drop_index("ix_tasks_context_id", "tasks")
    op.create_index("ix_messages_task_id_id", "messages", ["task_id", "id"])
    op.drop_index("ix_messages_task_id", "messages")


def downgrade() -> None:
    op.create_index("ix_messages_task_id", "messages", ["task_id"])
    op.drop_index("ix_messages_task_id_id", "messages")
    op.create_index("ix_tasks_context_id", "tasks", ["context_id"])
    op.drop_index("ix_tasks_owner_context_status_at", "tasks")
    op.drop_table("task_counts")
