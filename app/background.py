"""Background tasks of a component (a loop it starts in `open`, stops in `aclose`). Every room may import
this module: it imports nothing of ours."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait for it to end (its cancellation is not raised here); None: nothing to stop."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
