"""Coding sessions that outlive their machine: `task_checkpoints`, a running task's last checkpoint.

Revision ID: 0017_task_checkpoints
Revises: 0016_parent_task
Create Date: 2026-11-28

The holder of a coding task saves its workspace and its CLI's session (one archive, its digest beside it)
so that when the holder dies another one restores them and goes on (`store/run_checkpoints.py`). One row per
task, deleted with it. An addition: the release before this one neither reads nor writes the table (during
a roll, its runs save no checkpoint and its tasks cannot resume).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017_task_checkpoints"
down_revision = "0016_parent_task"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_checkpoints",
        sa.Column("task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("manifest", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("task_checkpoints")
