"""ListTasks: the current status's timestamp as a sortable column, indexed per owner.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("status_at", sa.String(32), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE tasks SET status_at = status->>'timestamp'")
    else:
        op.execute("UPDATE tasks SET status_at = json_extract(status, '$.timestamp')")
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column("status_at", existing_type=sa.String(32), nullable=False)
    op.create_index("ix_tasks_owner_status_at", "tasks", ["owner", "status_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_owner_status_at", "tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("status_at")
