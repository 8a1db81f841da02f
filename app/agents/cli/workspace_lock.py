"""`WorkspaceLock`: one run at a time in a context's workspace, across the processes of one machine.

The tasks of a context share its workspace (a checkout on its branch). The edge lets only one task of a
role be open in a context, but runs can still meet there: tasks of two roles in one context (a principal's
workspace is per context, not per role), a canceled task whose CLI is still being stopped while the next
task of its context starts, or another process of the same replica set on this machine. So a run takes an
exclusive `flock` on a file beside the workspace, `<principal root>/.locks/<context>.lock` (outside the
workspace and out of every jail, where an agent could hold it or delete it), before it prepares the
workspace, and keeps it until its CLI has stopped and its change is measured; the next run waits for it
(polled: a cancelled wait keeps nothing) and then starts from the first one's commits.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.1
FOLDER = ".locks"
"""The folder of the lock files, in the principal's root beside its workspaces (which never start with a
dot: `folders.folder_name`)."""


class WorkspaceLock:
    """The lock of one workspace, held by one run (the file's open descriptor, closed on release)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.held = False

    def take(self) -> bool:
        """Take the lock when it is free: whether this run holds it now."""
        if self.held:
            return True
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        return True

    async def wait(self, given_up: Callable[[], bool]) -> bool:
        """Wait for the lock: True once held, False when `given_up()` says the run no longer wants it."""
        while not self.take():
            if given_up():
                return False
            await asyncio.sleep(POLL_S)
        return True

    def release(self) -> None:
        """Let the next run in (again: nothing)."""
        if self._fd is not None:
            os.close(self._fd)  # and the lock with it
        self._fd = None
        self.held = False
