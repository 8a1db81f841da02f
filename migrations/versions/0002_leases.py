"""Leases: which replica may write a task, until when.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(256), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_tasks_state_created", "tasks", ["state", "created_at"])
    op.create_index("ix_tasks_lease_owner", "tasks", ["lease_owner"])


def downgrade() -> None:
    op.drop_index("ix_tasks_lease_owner", "tasks")
    op.drop_index("ix_tasks_state_created", "tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
