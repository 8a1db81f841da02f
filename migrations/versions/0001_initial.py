"""Tasks, messages, artifacts and the event log.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("context_id", sa.String(256), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("status", JSON, nullable=False),
        sa.Column("transitions", JSON, nullable=False),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index("ix_tasks_context_id", "tasks", ["context_id"])
    op.create_index("ix_tasks_owner_updated", "tasks", ["owner", "updated_at"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "messages",
        sa.Column("id", BIGID, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("message_id", sa.String(256), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("owner", "message_id", name="uq_messages_owner_message"),
    )
    op.create_index("ix_messages_task_id", "messages", ["task_id"])
    op.create_table(
        "artifacts",
        sa.Column(
            "task_id",
            sa.String(64),
            sa.ForeignKey("tasks.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("artifact_id", sa.String(256), nullable=False),
        sa.Column("append", sa.Boolean, nullable=False),
        sa.Column("body", JSON, nullable=False),
    )
    op.create_table(
        "events",
        sa.Column(
            "task_id",
            sa.String(64),
            sa.ForeignKey("tasks.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("artifacts")
    op.drop_index("ix_messages_task_id", "messages")
    op.drop_table("messages")
    op.drop_index("ix_tasks_state", "tasks")
    op.drop_index("ix_tasks_owner_updated", "tasks")
    op.drop_index("ix_tasks_context_id", "tasks")
    op.drop_table("tasks")
