"""The server's scratch folders in the temporary folder, and the sweep of those their process left.

The egress proxy (`egress.py`, `a2a-egress-*`) and each run's MCP tool server (`cli/tools.py`,
`a2a-tools-*`) keep a unix socket in a folder of their own (mode 0700). The process removes its folder when
it closes them, but a SIGKILLed one never does, so each folder names the process that made it: `owner.json`
holds its pid, that pid's start time (field 22 of /proc/<pid>/stat, so a reused pid is not taken for the
owner) and its pid namespace (a pid means nothing in another one). `make` writes it first, under a temporary
name renamed into place, so a record is never seen half-written and always before the socket.
A jail is shown the socket alone (egress) or a subfolder (`run/`, tools), never the record.

`sweep` (at each start of a server or worker that runs CLIs, in a thread) removes the folders of these
prefixes whose owner is gone: no such pid, a zombie, or that pid with another start time. It keeps every
other one: a live owner's (another server or test on the host), one not ours (another user's, a symlink),
one of another pid namespace (a container sharing the temporary folder), and one with no readable record.
The last includes a folder being made right now (its record not renamed in yet) and those made before
folders had records: their age says nothing (an egress folder is as old as its live server) and only
connecting to their sockets would tell, which is not ours to do. Those are the operator's to remove.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple

PREFIXES = ("a2a-egress-", "a2a-tools-")
"""The folders `sweep` looks at; `make` takes only these."""
RECORD = "owner.json"
LONGEST_ROOT = 70
"""A unix socket's path holds at most 107 bytes, and the deepest under a folder is 34
(`/a2a-tools-XXXXXXXX/run/tools.sock`): a temporary folder longer than this (a TMPDIR deep in a test's or
a CI job's tree) gives way to `/tmp`, or every run would fail with "AF_UNIX path too long"."""


class Owner(NamedTuple):
    """The process that made a folder, as it recorded itself."""

    pid: int
    start: int
    """Field 22 of /proc/<pid>/stat: clock ticks after boot when the process started."""
    pidns: str
    """The target of /proc/<pid>/ns/pid, e.g. `pid:[4026531836]`."""


def make(prefix: str, root: Path | None = None) -> Path:
    """A new folder (mode 0700) named `<prefix>...` in `root` (`base()`), its record written
    before it is returned."""
    if prefix not in PREFIXES:
        raise ValueError(f"{prefix!r} is not a scratch prefix ({', '.join(PREFIXES)})")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root if root is not None else base()))
    me = _me()
    if me is not None:
        partial = folder / f".{RECORD}.tmp"
        try:
            partial.write_text(json.dumps(me._asdict()))
            os.replace(partial, folder / RECORD)
        except BaseException:  # a folder without its record would never be swept
            remove(folder)
            raise
    return folder


def base() -> Path:
    """Where the folders go: the temporary folder, or `/tmp` when that is too long for a socket's path."""
    tmp = Path(tempfile.gettempdir())
    return tmp if len(str(tmp)) <= LONGEST_ROOT else Path("/tmp")


def remove(folder: Path) -> None:
    """Remove a folder `make` made, with whatever is in it."""
    shutil.rmtree(folder, ignore_errors=True)


def sweep(root: Path | None = None) -> int:
    """Remove the folders in `root` (`base()`) whose recorded owner is gone (module docstring);
    how many. Call it off the event loop: it reads the folder and /proc."""
    me = _me()
    if me is None:
        return 0
    where = Path(root) if root is not None else base()
    try:
        with os.scandir(where) as scan:
            entries = [e for e in scan if e.name.startswith(PREFIXES)]
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        folder = Path(entry.path)
        owner = read_owner(folder)
        if owner is None or owner.pidns != me.pidns or _alive(owner):
            continue
        remove(folder)
        if not os.path.lexists(folder):
            removed += 1
    return removed


def read_owner(folder: Path) -> Owner | None:
    """The record of a folder of this user (not a symlink), or None when there is none to trust."""
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None
        fd = os.open(folder / RECORD, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(4096))
        owner = Owner(data["pid"], data["start"], data["pidns"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (type(owner.pid) is int and owner.pid > 0 and type(owner.start) is int):  # not a bool either
        return None
    return owner if isinstance(owner.pidns, str) and owner.pidns else None


def _alive(owner: Owner) -> bool:
    """The recorded process still runs: its pid is there, not a zombie, with the same start time."""
    started = _started(owner.pid)
    return started is not None and started == owner.start


def _started(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (its start time), or None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
        fields = raw[raw.rfind(")") + 2 :].split()  # the name (field 2) may hold spaces and parentheses
        return None if fields[0] in ("Z", "X") else int(fields[19])  # fields[0] is field 3
    except (OSError, IndexError, ValueError):
        return None


def _me() -> Owner | None:
    """This process's record; None where /proc does not say (then nothing is recorded nor swept), or is
    another pid namespace's (its pids are not ours: /proc/self is not our pid there)."""
    pid = os.getpid()
    try:
        if os.readlink("/proc/self") != str(pid):
            return None
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    started = _started(pid)
    return None if started is None else Owner(pid, started, pidns)
