"""One open task per context for an agent with effects: `tasks.exclusive` and a partial unique index.

Revision ID: 0015_open_context
Revises: 0014_run_started
Create Date: 2026-11-27

Two tasks of one context could run at once in the context's one workspace and load the same CLI session.
A task of an agent with effects (not `pure`) is now stored `exclusive`, and the index allows one open
(not ended) such task per owner, role and context: a second is refused (docs/protocol.md "One open task
per context"). Every task before it is not `exclusive`, so the index holds at once. An addition: the
release before this one neither reads nor writes the column (during a roll its new tasks are not checked).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_open_context"
down_revision = "0014_run_started"
branch_labels = None
depends_on = None

OPEN = sa.text("exclusive AND state NOT IN ('canceled', 'completed', 'failed', 'rejected')")


def upgrade() -> None:
    # Not a batch: on SQLite a batch copies the table, and dropping the old one cascades to its rows' events.
    op.add_column("tasks", sa.Column("exclusive", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_index(
        "uq_tasks_open_context",
        "tasks",
        ["owner", "role", "context_id"],
        unique=True,
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )


def downgrade() -> None:
    op.drop_index("uq_tasks_open_context", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("exclusive")
