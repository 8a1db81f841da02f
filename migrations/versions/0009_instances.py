"""Discovery: the agent instances live now, one row per role a process (replica or remote worker) runs.

Revision ID: 0009_instances
Revises: 0008_task_role
Create Date: 2026-11-27

Each process refreshes `last_seen` every DISCOVERY_HEARTBEAT_S; `GET /agents` lists the rows seen within
DISCOVERY_MAX_AGE_S. A new table: nothing existing is touched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009_instances"
down_revision = "0008_task_role"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_instances",
        sa.Column("name", sa.String(512), primary_key=True),
        sa.Column("role", sa.String(40), nullable=False),
        sa.Column("instance_id", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("description", sa.String(2048), nullable=False),
        sa.Column("card_url", sa.String(2048), nullable=False),
        sa.Column("capabilities", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_agent_instances_last_seen", "agent_instances", ["last_seen"])


def downgrade() -> None:
    op.drop_index("ix_agent_instances_last_seen", "agent_instances")
    op.drop_table("agent_instances")
