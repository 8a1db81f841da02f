"""Traces: the W3C `traceparent` of the request that created a task.

Revision ID: 0013_traceparent
Revises: 0012_retention
Create Date: 2026-12-01

With tracing on (`OTEL_EXPORTER_OTLP_ENDPOINT`) a new task keeps its creating request's trace context, so its
agent runs (on any replica or remote worker, every turn) and its webhook calls continue that trace. A column
rather than a key in `metadata`, which every binding prints to clients. NULL for tasks created with tracing
off and for existing ones. An addition: the release before this one neither reads nor writes it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_traceparent"
down_revision = "0012_retention"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("traceparent")
