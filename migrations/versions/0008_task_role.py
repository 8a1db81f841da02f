"""Teams of agents: each task remembers the role (the agent) it was sent to.

Revision ID: 0008_task_role
Revises: 0007_lease_suspect
Create Date: 2026-11-26

Existing tasks belong to the role `default`: without `AGENTS`, the one role a deployment serves. No index
of its own: a role's claims find its queued tasks through `(state, created_at)` (queued tasks are few), and
another index on a column set at every state change would cost every write.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_task_role"
down_revision = "0007_lease_suspect"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("role", sa.String(40), nullable=False, server_default="default"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("role")
