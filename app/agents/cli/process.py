"""A coding-agent CLI as a child process: NDJSON out, JSON lines in, and a stop that leaves no orphans.

`CliProcess` is the low-level part every CLI adapter shares:

    proc = CliProcess(["claude", "-p", ...], cwd=workspace, env=env, launcher=jail)  # env: all it gets
    await proc.start()                  # own session and process group (start_new_session=True)
    await proc.send({"type": "user", ...})   # one JSON line on stdin; stdin stays open until close_stdin()
    async for obj in proc.messages(idle_timeout_s=900):   # each JSON object printed on stdout
        ...                             # raises IdleTimeout when stdout is silent that long
    code = await proc.wait()            # exit status; proc.stderr_tail() for the error message
    await proc.stop(grace_s=5, interrupt=hook)  # hook (the CLI's own interrupt), SIGTERM, SIGKILL at 5 s

Why it is written this way:
- stdout is read in chunks and split by hand, so a line of any length (a whole file in a tool result)
  never hits asyncio's StreamReader line limit; lines that are not JSON objects (banners, warnings) are
  skipped, as the official SDKs do.
- stderr is drained continuously (a full pipe would block the CLI) and only a bounded tail is kept.
- `stop()` signals the whole process group and, in case a tool called setsid(), every descendant it can
  still see, then waits until none is left alive (zombies waiting for a reaper do not count), so a
  cancelled task really stops its `npm test`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

CHUNK = 1 << 16
MAX_LINE = 64 << 20
"""A line longer than this is dropped (not the run): 64 MiB is far beyond any real event."""
STDERR_TAIL = 8192
RUN_ENV = "A2A_AGENT_RUN_ID"
"""Set to a fresh id in each CLI's environment: tools inherit it, so `stop()` finds a tool that left the
CLI's session and was orphaned (codex's sandbox helper does both) by the id in /proc/<pid>/environ."""
OWNER_ENV = "A2A_AGENT_OWNER"
"""The replica that started the CLI, in its environment: after that replica is killed (no chance to stop its
CLIs), its next start finds what it left by this marker and kills it (`reap_orphans`)."""
KILL_WAIT_S = 5.0
"""After SIGKILL, how long to wait for the processes to vanish before giving up with a warning."""


class IdleTimeout(Exception):
    """The CLI printed nothing on stdout for the idle limit."""


class LineFramer:
    """Splits a byte stream into lines; keeps a partial line across chunks and drops oversized ones."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buf = bytearray()
        self._max = max_line
        self._skipping = False

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            if self._skipping:
                self._skipping = False
            else:
                self._buf += chunk[start:nl]
                lines.append(bytes(self._buf))
            self._buf.clear()
            start = nl + 1
        if not self._skipping:
            self._buf += chunk[start:]
            if len(self._buf) > self._max:
                log.warning("dropping a stdout line longer than %d bytes", self._max)
                self._buf.clear()
                self._skipping = True
        return lines

    def end(self) -> list[bytes]:
        """The last line when the stream ends without a newline."""
        rest = b"" if self._skipping else bytes(self._buf)
        self._buf.clear()
        return [rest] if rest.strip() else []


def parse_line(line: bytes) -> dict[str, Any] | None:
    """A JSON object, or None for anything else (blank, banner text, a bare JSON value, broken JSON)."""
    line = line.strip()
    if not line.startswith(b"{"):
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


class CliProcess:
    """One CLI process in its own session; see the module docstring for the lifecycle."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str] | None = None,
        stderr_tail: int = STDERR_TAIL,
        owner: str | None = None,
        launcher: Callable[[list[str], Mapping[str, str]], list[str]] | None = None,
    ) -> None:
        """`env` is the CLI's whole environment (nothing of the server's is added); `owner` names the
        replica; `launcher` turns argv into the command actually started (the jail around it)."""
        self.argv = list(argv)
        self.cwd = cwd
        self.run_id = uuid.uuid4().hex
        self.launcher = launcher
        self.env = {**(env or {}), RUN_ENV: self.run_id}
        if owner:
            self.env[OWNER_ENV] = owner
        self._proc: asyncio.subprocess.Process | None = None
        self._messages: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._stderr_max = stderr_tail
        self._readers: list[asyncio.Task[None]] = []
        self._stdout_done = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    async def start(self) -> None:
        """Spawn the CLI. Raises FileNotFoundError/PermissionError when the binary cannot run."""
        self.cwd.mkdir(parents=True, exist_ok=True)
        command = self.launcher(self.argv, self.env) if self.launcher else self.argv
        self._proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=self.cwd,
            env=self.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._readers = [
            asyncio.create_task(self._read_stdout(), name=f"cli-stdout-{self.pid}"),
            asyncio.create_task(self._read_stderr(), name=f"cli-stderr-{self.pid}"),
        ]

    async def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        framer = LineFramer()
        try:
            while chunk := await self._proc.stdout.read(CHUNK):
                for line in framer.feed(chunk):
                    self._put(line)
            for line in framer.end():
                self._put(line)
        finally:
            self._messages.put_nowait(None)

    def _put(self, line: bytes) -> None:
        obj = parse_line(line)
        if obj is not None:
            self._messages.put_nowait(obj)
        elif line.strip():
            log.debug("cli %s: non-JSON stdout line: %.200r", self.pid, line)

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(CHUNK):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= self._stderr_max:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_tail(self, limit: int | None = None) -> str:
        """The last `limit` (default: the kept) bytes of stderr, decoded leniently and stripped."""
        data = b"".join(self._stderr)[-(limit or self._stderr_max) :]
        return data.decode("utf-8", "replace").strip()

    async def messages(self, idle_timeout_s: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """Each JSON object the CLI prints, until stdout closes.

        Raises IdleTimeout after `idle_timeout_s` without one; `next_message` lets a caller vary the
        limit (no limit while the CLI waits for the user's approval).
        """
        while (obj := await self.next_message(idle_timeout_s)) is not None:
            yield obj

    async def next_message(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The next JSON object, None once stdout has closed; IdleTimeout after `timeout_s`."""
        if self._stdout_done:
            return None
        try:
            obj = await asyncio.wait_for(self._messages.get(), timeout_s)
        except TimeoutError:
            raise IdleTimeout() from None
        if obj is None:
            self._stdout_done = True
        return obj

    async def send(self, obj: Any) -> bool:
        """Write one JSON line to stdin; False when the CLI no longer reads it (exited, stdin closed)."""
        stdin = self._proc.stdin if self._proc else None
        if stdin is None or stdin.is_closing():
            return False
        try:
            stdin.write(orjson.dumps(obj) + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def close_stdin(self) -> None:
        """End the CLI's input (most CLIs then finish their turn and exit)."""
        stdin = self._proc.stdin if self._proc else None
        if stdin is not None and not stdin.is_closing():
            stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await stdin.wait_closed()

    async def wait(self) -> int:
        """Wait for the CLI to exit and for its output to be read; its exit status."""
        assert self._proc is not None
        code = await self._proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        return code

    async def stop(self, grace_s: float, interrupt: Callable[[], Awaitable[object]] | None = None) -> None:
        """Stop the CLI and everything it started; returns once none of them is alive.

        `interrupt` is the CLI's own way to stop (e.g. a control message); it gets half of `grace_s`
        to end the process, then the group gets SIGTERM, and what is left when `grace_s` has passed
        gets SIGKILL. One grace period in all: the runner gives a cancel `grace_s` plus a second, and
        tasks/cancel must not return while the tools still run.
        """
        if self._proc is None:
            return
        pid = self._proc.pid
        groups: set[int] = set()
        loop = asyncio.get_running_loop()
        kill_at = loop.time() + grace_s

        def family() -> set[int]:
            return _family(pid, groups, self.run_id)

        # Seen before the interrupt: tools the CLI leaves behind when it exits are still found after.
        family()
        if interrupt is not None and self._proc.returncode is None:
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(grace_s / 2):
                    await interrupt()
                    await self.close_stdin()
                    await self._proc.wait()
        await self.close_stdin()
        targets = family()
        if targets:
            _signal_all(pid, targets, signal.SIGTERM)
            if not await _gone(targets, max(kill_at - loop.time(), 0.0), family, signal.SIGTERM):
                targets |= family()
                _signal_all(pid, targets, signal.SIGKILL)
                if not await _gone(targets, KILL_WAIT_S, family, signal.SIGKILL):
                    log.warning("cli %s: processes %s survived SIGKILL", pid, sorted(_alive(targets)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wait(), KILL_WAIT_S)
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


# ---- process bookkeeping through /proc ------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _has_env(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def _family(leader: int, groups: set[int] | None = None, run_id: str | None = None) -> set[int]:
    """Live processes that belong to the CLI: its session, its group, and its descendants, plus those
    whose environment carries `run_id` and the members of any session or group a member had.

    A tool that starts its own session and is orphaned by its parent's death has init as its parent;
    only its inherited environment (or a session id seen earlier: `groups`, updated in place) still
    says it belongs to the CLI.
    """
    known = {leader} if groups is None else groups
    known.add(leader)
    stats = {pid: st for pid in _all_pids() if (st := _stat(pid)) is not None and st[0] != "Z"}
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = {leader} if leader in stats else set()
    if run_id:
        marker = f"{RUN_ENV}={run_id}\0".encode()
        found |= {pid for pid in stats if pid != os.getpid() and _has_env(pid, marker)}
    while True:
        size = len(found)
        found |= {pid for pid, (_, _, pgrp, sid) in stats.items() if pgrp in known or sid in known}
        todo = list(found)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        for pid in found:
            known.update(stats[pid][2:])
        if len(found) == size:
            return found


def reap_orphans(owner: str) -> int:
    """Kill every process a previous life of replica `owner` started and left behind (it was SIGKILLed
    or crashed, so it never stopped its CLIs); call before this life starts any. Returns how many."""
    marker = f"{OWNER_ENV}={owner}\0".encode()
    me = os.getpid()
    left = {pid for pid in _all_pids() if pid != me and _has_env(pid, marker)}
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(left)


def _signal_all(leader: int, pids: set[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (st := _stat(pid)) is not None and st[0] != "Z"}


async def _gone(
    pids: set[int],
    within_s: float,
    rescan: Callable[[], set[int]] | None = None,
    sig: signal.Signals | None = None,
) -> bool:
    """Poll until none of `pids` is alive; False if some still are after `within_s`.

    With `rescan`, processes that joined the family meanwhile (a fork racing the signal) get `sig` too
    and are waited for as well.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        if rescan is not None and (late := rescan() - pids):
            pids |= late
            if sig is not None:
                for pid in late:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
        if not _alive(pids):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.05)
