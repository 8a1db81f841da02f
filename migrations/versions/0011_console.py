"""The console: a task's title (its first message's text, short) and a keyset over every owner's tasks.

Revision ID: 0011_console
Revises: 0010_task_usage
Create Date: 2026-11-26

`title` is written once, when the task is stored, so the console lists and filters by text without
reading messages. `ix_tasks_status_at` serves the list of every owner's tasks that `CONSOLE_ADMINS` see
(newest status first, the order ListTasks uses per owner). Existing tasks keep a NULL title: the console
shows their id. Both are additions: the release before this one neither reads nor writes them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_console"
down_revision = "0010_task_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("title", sa.String(200), nullable=True))
    op.create_index("ix_tasks_status_at", "tasks", ["status_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_status_at", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("title")
