"""messageId reuse is a new message; retries of a running task's first message and Idempotency-Keys.

Drops the (owner, messageId) uniqueness of history rows, adds `tasks.retry_key` (unique per owner while a
task runs) and the `idempotency_keys` table.

Revision ID: 0006_idem
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006_idem"
down_revision = "0005"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # Batch mode: SQLite can only drop a table constraint by copying the table.
    with op.batch_alter_table("messages") as batch:
        batch.drop_constraint("uq_messages_owner_message", type_="unique")
    op.add_column("tasks", sa.Column("retry_key", sa.String(64), nullable=True))
    op.create_index("uq_tasks_owner_retry_key", "tasks", ["owner", "retry_key"], unique=True)
    op.create_table(
        "idempotency_keys",
        sa.Column("owner", sa.String(256), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(64), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=True),
        sa.Column("reply", Json, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_expires_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_index("uq_tasks_owner_retry_key", table_name="tasks")
    # Not batch mode: on SQLite it copies `tasks`, and dropping the old copy would cascade-delete every
    # task's history (foreign keys are on). SQLite drops a plain column in place since 3.35.
    op.drop_column("tasks", "retry_key")
    # The older code keys history by (owner, messageId): keep the first row of each reused id.
    op.execute(
        "DELETE FROM messages WHERE id NOT IN (SELECT MIN(id) FROM messages GROUP BY owner, message_id)"
    )
    with op.batch_alter_table("messages") as batch:
        batch.create_unique_constraint("uq_messages_owner_message", ["owner", "message_id"])
