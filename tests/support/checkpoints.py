"""What a stored checkpoint holds, for tests that kill a holder once its work is saved.

A checkpoint's `taken_at` is when the store took it, not when the holder captured the archive: on a busy
machine a capture that began before a file was written can be stored after it. So a test that needs a file
kept waits until the archive itself holds it, never for a `taken_at` later than the file's mtime.
"""

from __future__ import annotations

import io
import tarfile

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.cli.checkpoint import WORKSPACE
from app.store.models import TaskCheckpointRow


def members(data: bytes) -> set[str]:
    """The names in a checkpoint's archive (`workspace/…`, `home/…`, `records/…`); none for a broken one."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            return set(tar.getnames())
    except (tarfile.TarError, EOFError, OSError):
        return set()


def holds_files(data: bytes, *workspace_files: str) -> bool:
    """Whether a checkpoint's archive holds each of `workspace_files` (relative to the workspace)."""
    names = members(data)
    return all(f"{WORKSPACE}/{f}" in names for f in workspace_files)


async def holds(engine: AsyncEngine, task_id: str, *workspace_files: str, session: bool = False) -> bool:
    """Whether the task's stored checkpoint holds each of `workspace_files` (relative to the workspace) and,
    with `session`, the CLI's session files."""
    query = select(TaskCheckpointRow.data, TaskCheckpointRow.manifest).where(
        TaskCheckpointRow.task_id == task_id
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).first()
    if row is None or row.data is None:
        return False
    if not holds_files(bytes(row.data), *workspace_files):
        return False
    return not session or bool(((row.manifest or {}).get("holds") or {}).get("home"))
