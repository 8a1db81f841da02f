"""Push outbox rows point at the event instead of carrying its body (built at delivery).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # Batch mode: SQLite can only change a column's nullability by copying the table.
    with op.batch_alter_table("push_outbox") as batch:
        batch.alter_column("body", existing_type=Json, nullable=True)
        batch.add_column(sa.Column("history_len", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Rows queued without a body cannot be delivered by the older code: drop them with the column.
    op.execute("DELETE FROM push_outbox WHERE body IS NULL")
    with op.batch_alter_table("push_outbox") as batch:
        batch.drop_column("history_len")
        batch.alter_column("body", existing_type=Json, nullable=False)
