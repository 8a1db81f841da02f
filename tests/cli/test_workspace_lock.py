"""`WorkspaceLock` across processes: a real other process holding the lock file keeps a run out until it
lets go, and a run that gives up waiting holds nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from app.agents.cli.workspace_lock import WorkspaceLock

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


async def test_another_process_holding_the_workspace_keeps_the_run_waiting_until_it_lets_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".locks" / "ctx.lock"
    path.parent.mkdir()
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(30):
            assert await holder.stdout.readline() == b"held\n"
        lock = WorkspaceLock(path)
        assert not lock.take() and not lock.held
        waiting = asyncio.create_task(lock.wait(lambda: False))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert holder.stdin is not None
        holder.stdin.close()  # the holder exits, and its lock goes with it
        async with asyncio.timeout(30):
            assert await waiting is True
        assert lock.held
        other = WorkspaceLock(path)
        assert not other.take(), "a second run of this process is kept out as well"
        lock.release()
        assert other.take()
        other.release()
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


async def test_a_run_that_gives_up_waiting_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".locks" / "ctx.lock"
    first = WorkspaceLock(path)
    assert first.take() and first.take(), "taking it again while held is a no-op"
    second = WorkspaceLock(path)
    assert await second.wait(lambda: True) is False
    second.release()
    first.release()
    first.release()
    assert second.take(), "released: the next run takes it"
    second.release()
