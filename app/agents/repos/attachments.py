"""`write_attachments`: the files a client attached to a message, written under the workspace's
`attachments/` folder for the agent to read.

A name comes from the client, and the workspace from the agent's earlier turns (a link it left in
`attachments/` would send a write anywhere the server may write). So every part is checked before anything
is written, and one bad part refuses them all: no empty name, absolute path, `..`, `.git`, control
character or backslash; no link and no file where a folder must be, and no folder or link where the file
goes; sizes within the limits. Then each file is written through folder handles opened without following
links (`O_NOFOLLOW`), to a temporary name and renamed over the old one, so an existing file's other hard
links are never written through.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from .cache import ATTACHMENTS
from .errors import RepoError

MAX_PART_BYTES = 255
_BAD = re.compile(r"[\x00-\x1f\x7f\\]")


def write_attachments(
    workspace: Path, files: Sequence[tuple[str, bytes]], max_bytes_each: int, max_bytes_total: int
) -> list[Path]:
    """Write `files` (name, content) under `workspace/attachments/`: their paths, in order. RepoError naming
    the first part refused, with nothing written."""
    checked = check_attachments(files, max_bytes_each, max_bytes_total)
    for (name, _), parts in zip(files, checked, strict=True):
        _check_way(workspace, name, parts)
    workspace.mkdir(parents=True, exist_ok=True)
    return [_write(workspace, parts, data) for parts, data in checked.items()]


def check_attachments(
    files: Sequence[tuple[str, bytes]], max_bytes_each: int, max_bytes_total: int
) -> dict[tuple[str, ...], bytes]:
    """The checks of `write_attachments` that need no disk (names, sizes, a name twice, a file that would
    be a folder of another): each file's path parts under `attachments/` with its bytes, in order.
    RepoError naming the first part refused."""
    checked: dict[tuple[str, ...], bytes] = {}
    total = 0
    for name, data in files:
        parts = _parts(name)
        if len(data) > max_bytes_each:
            raise RepoError(f"attachment {name!r} has {len(data)} bytes, over the limit of {max_bytes_each}")
        total += len(data)
        if total > max_bytes_total:
            raise RepoError(
                f"attachment {name!r} takes the message's files over the limit of {max_bytes_total} bytes"
            )
        if parts in checked:
            raise RepoError(f"attachment {name!r} is named twice")
        clash = next((p for p in checked if p[: len(parts)] == parts or parts[: len(p)] == p), None)
        if clash is not None:
            raise RepoError(
                f"attachment {name!r} would be a file and a folder of {'/'.join(clash)!r} at once"
            )
        checked[parts] = data
    return checked


def _parts(name: str) -> tuple[str, ...]:
    """The folders and file name of an attachment, relative to `attachments/`; RepoError when refused."""
    if not isinstance(name, str) or not name.strip():
        raise RepoError("an attachment has no name")
    if _BAD.search(name):
        raise RepoError(f"attachment {name!r} has a control character or a backslash in its name")
    if name.startswith("/"):
        raise RepoError(f"attachment {name!r} is an absolute path; name it relative to attachments/")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise RepoError(f"attachment {name!r} has '..' in its path")
    if ".git" in parts:
        raise RepoError(f"attachment {name!r} has '.git' in its path")
    if not parts:
        raise RepoError(f"attachment {name!r} names no file")
    if any(len(p.encode()) > MAX_PART_BYTES for p in parts):
        raise RepoError(f"attachment {name!r} has a name longer than {MAX_PART_BYTES} bytes")
    return parts


def _check_way(workspace: Path, name: str, parts: tuple[str, ...]) -> None:
    """RepoError when what is on disk now would take the write elsewhere: a link, or a file where a folder
    must be, or a folder or link where the file goes."""
    path = workspace
    for i, part in enumerate((ATTACHMENTS, *parts)):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        last = i == len(parts)
        if stat.S_ISLNK(mode):
            raise RepoError(f"attachment {name!r}: {path} is a link; nothing is written through links")
        if not last and not stat.S_ISDIR(mode):
            raise RepoError(f"attachment {name!r}: {path} is a file where a folder must be")
        if last and not stat.S_ISREG(mode):
            raise RepoError(f"attachment {name!r}: {path} is there already and is not a file")


def _write(workspace: Path, parts: tuple[str, ...], data: bytes) -> Path:
    """Write one checked attachment through folder handles that follow no link."""
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in (ATTACHMENTS, *parts[:-1]):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        tmp = f".a2a-{secrets.token_hex(8)}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
            finally:
                os.close(out)
            os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
    return workspace.joinpath(ATTACHMENTS, *parts)
