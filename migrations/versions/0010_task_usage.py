"""Usage and cost: what each agent run reported using, one row per report and model.

Revision ID: 0010_task_usage
Revises: 0009_instances
Create Date: 2026-11-28

Written with the status event that carries the report (its `seq`), summed by owner, context, role, model
and day by `GET /usage`; the task's own sum is in `tasks.metadata` (key `usage`), which needs no change. A
new table: nothing existing is touched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_task_usage"
down_revision = "0009_instances"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_usage",
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("context_id", sa.String(256), nullable=False),
        sa.Column("role", sa.String(40), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("cost_source", sa.String(16), nullable=True),
        sa.Column("wall_ms", sa.BigInteger(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("reports", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "seq", "model", name="task_usage_pkey"),
    )
    op.create_index("ix_task_usage_owner_day", "task_usage", ["owner", "day"])
    op.create_index("ix_task_usage_owner_context_day", "task_usage", ["owner", "context_id", "day"])
    op.create_index("ix_task_usage_day", "task_usage", ["day"])


def downgrade() -> None:
    op.drop_index("ix_task_usage_day", "task_usage")
    op.drop_index("ix_task_usage_owner_context_day", "task_usage")
    op.drop_index("ix_task_usage_owner_day", "task_usage")
    op.drop_table("task_usage")
