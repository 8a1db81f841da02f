"""A remote worker that leaves stays gone: `agent_instances.left_at`.

Revision ID: 0018_instance_left
Revises: 0017_task_checkpoints
Create Date: 2026-12-02

A worker stopping cleanly tells the server it is leaving; the row was deleted, so a claim the worker had sent
before, handled by another replica after, wrote it back and the worker stayed listed until it aged out. The
row is now marked left instead (`store/instances.py`). An addition: the release before this one neither
reads nor writes the column (during a roll, a worker leaving through it is deleted as before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_instance_left"
down_revision = "0017_task_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_instances", sa.Column("left_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("agent_instances", "left_at")
