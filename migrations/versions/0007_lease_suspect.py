"""Reaping by suspicion: when a reaper first saw a task's lease expired (with the database answering).

Revision ID: 0007_lease_suspect
Revises: 0006_scale_counts
Create Date: 2026-11-26

A lease that expired while the database was away belongs to a replica that may be alive and about to renew
it; a reaper ends such a task only a lease TTL after it marked the lease with the database answering, and
any renewal or commit by the holder clears the mark. A nullable column: adding it rewrites nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_lease_suspect"
down_revision = "0006_scale_counts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("lease_suspect_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("lease_suspect_at")
