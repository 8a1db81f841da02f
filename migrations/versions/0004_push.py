"""Push notifications: webhooks per task and the delivery outbox.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")
Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "push_configs",
        sa.Column("pk", BigId, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("config_id", sa.String(256), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("version", sa.String(8), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("token", sa.String(1024), nullable=True),
        sa.Column("auth_scheme", sa.String(64), nullable=True),
        sa.Column("auth_credentials", sa.String(4096), nullable=True),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("retry_at", Ts, nullable=True),
        sa.Column("claimed_by", sa.String(256), nullable=True),
        sa.Column("claim_expires_at", Ts, nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("delivered", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_outcome", sa.String(512), nullable=True),
        sa.Column("last_attempt_at", Ts, nullable=True),
        sa.Column("last_delivered_at", Ts, nullable=True),
        sa.UniqueConstraint("task_id", "config_id", name="uq_push_configs_task_config"),
    )
    op.create_index("ix_push_configs_claimed_by", "push_configs", ["claimed_by"])
    op.create_table(
        "push_outbox",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("config_pk", BigId, sa.ForeignKey("push_configs.pk", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("body", Json, nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", Ts, nullable=False),
    )
    op.create_index("ix_push_outbox_config_seq", "push_outbox", ["config_pk", "seq"])


def downgrade() -> None:
    op.drop_index("ix_push_outbox_config_seq", "push_outbox")
    op.drop_table("push_outbox")
    op.drop_index("ix_push_configs_claimed_by", "push_configs")
    op.drop_table("push_configs")
