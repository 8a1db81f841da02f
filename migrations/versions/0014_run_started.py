"""A run is started once: when the agent of a task began, committed before the agent starts.

Revision ID: 0014_run_started
Revises: 0013_traceparent
Create Date: 2026-11-27

A `submitted` task whose agent was started (a CLI may already have changed files and run commands) but whose
holder died before its first event was committed looked as if it had never started: claimed again, or
restarted by its replica's next life, it ran twice. `run_started_at` is written with the claim (or the
creation) that a run starts from, so such a task is ended as lost instead. NULL for every task before it
and for the runs of agents with no effects (`Agent.pure`), which may run again. An addition: the release
before this one neither reads nor writes it (during a roll its claims still take such a task).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_run_started"
down_revision = "0013_traceparent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("run_started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("run_started_at")
