"""A CLI run's checkpoint: the archive another machine restores to go on with the task (`checkpoints.py`).

The archive (tar.gz, built and unpacked in a thread) holds, under three folders:

- `workspace/`: the context's workspace, a repository task's checkout with its `.git`. A checkout the server
  makes owns its objects (`repos/cache.py`: `--no-local`, no `alternates`); should one borrow objects all the
  same, the borrowed ones are put in the archive and its `alternates` left out, so it restores anywhere.
  A link that points out of the workspace (or to an absolute path) is left out, and named in the manifest:
  a restore refuses such links. So are the locks git holds while it writes (`.git/index.lock`).
- `home/`: the CLI's files of the session in the principal's HOME, as the adapter names them
  (`CliRun.session_files`): Claude Code's transcript under `~/.claude/projects/<the workspace's path,
  escaped>/`, Codex's rollout file under `$CODEX_HOME/sessions/`, unattended Gemini CLI's chat files under
  `~/.gemini/tmp/<project>/chats/`. An adapter that names none (Gemini in ACP mode, which resumes nothing;
  Cursor, whose session store is its own) carries no session: the restored run starts a new one in the
  restored workspace.
- `records/`: what the server keeps beside the workspace (`folders.py`): the session record (only with the
  session's files), the `allow_always` rules, the context's recorded repository.

The manifest (JSON, saved beside the archive) names the adapter, the session id, the workspace's path where it
was taken and what the archive holds. An archive over the store's `max_bytes` is not built to its end.

A restore unpacks into a temporary folder in the principal's root first (tarfile's `data` filter: no absolute
names, no `..`, no links out of it, no devices; anything outside the three folders refused), then moves each
part into this machine's place: the workspace where this machine keeps it, the session files where the CLI
here looks for them (`CliRun.session_place`: Claude's and Gemini's project folder of the new path), the
records. Nothing
is ever restored outside the principal's root, and a checkpoint that cannot be read restores nothing.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from ..checkpoints import Checkpoint, CheckpointError, CheckpointStore
from ..jail.sandbox import principal_home, principal_root
from ..options import AgentOptions
from .folders import allowed_file, ledger_file, session_file

log = logging.getLogger(__name__)

VERSION = 1
"""The archive's layout (`version` in the manifest)."""
WORKSPACE, HOME, RECORDS = "workspace", "home", "records"
ALTERNATES = PurePosixPath(".git/objects/info/alternates")
COMPRESS_LEVEL = 6


class TooLarge(Exception):
    """The archive grew past the store's `max_bytes`."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where one context's checkpointed parts are on this machine, all under its principal's `root`."""

    root: Path
    workspace: Path
    home: Path
    records: dict[str, Path] = field(default_factory=dict)
    """`session`, `allowed`, `ledger` → the server's file of it (`folders.py`)."""

    @classmethod
    def of(
        cls, options: AgentOptions, adapter: str, principal: str, context_id: str, workspace: Path
    ) -> Place:
        """The run's place; the HOME made (and seeded) first, as a CLI's first run here would make it."""
        args = (options, adapter, principal, context_id)
        records = {
            "session": session_file(*args),
            "allowed": allowed_file(*args),
            "ledger": ledger_file(options, principal, context_id),
        }
        return cls(principal_root(options, principal), workspace, principal_home(options, principal), records)


class _Capped(io.RawIOBase):
    """The archive's bytes in memory, TooLarge past `limit`."""

    def __init__(self, limit: int) -> None:
        self.buffer = io.BytesIO()
        self.limit = limit

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = self.buffer.write(data)
        if self.buffer.tell() > self.limit:
            raise TooLarge(f"the checkpoint passed {self.limit} bytes")
        return n


def _inside(link: Path, target: str, top: Path) -> bool:
    """Whether the symlink `link` → `target` stays under `top` (a relative target only), followed through
    the links before it as a restore's `data` filter follows them."""
    if os.path.isabs(target):
        return False
    resolved = os.path.realpath(os.path.join(os.path.dirname(link), target))
    real_top = os.path.realpath(top)
    return resolved == real_top or resolved.startswith(real_top + os.sep)


def _walk(top: Path) -> Iterator[Path]:
    """Every folder, file and link under `top` (links not followed), parents before children."""
    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        for name in sorted(dirs):
            yield here / name
        for name in sorted(files):
            yield here / name


class _Archive:
    """One archive being written: members added once, links out of their tree left out."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: set[str] = set()
        self.skipped: list[str] = []

    def add(self, path: Path, name: str, top: Path) -> None:
        if name in self.names:
            return
        self.tar.inodes.clear()  # a hard link is archived as the file it is: no link between members
        try:
            info = self.tar.gettarinfo(str(path), arcname=name)
        except FileNotFoundError:  # gone while the CLI works: the next checkpoint has what is there then
            return
        if info is None or not (info.isreg() or info.isdir() or info.issym()):
            self.skipped.append(name)  # a socket, a fifo, a device: nothing a restore takes
            return
        if info.issym() and not _inside(path, info.linkname, top):
            self.skipped.append(name)
            return
        self.names.add(name)
        if info.isreg():
            try:
                with open(path, "rb") as f:
                    self.tar.addfile(info, f)
            except FileNotFoundError:
                self.names.discard(name)
            return
        self.tar.addfile(info)

    def tree(self, top: Path, prefix: str, leave_out: frozenset[PurePosixPath] = frozenset()) -> None:
        self.add(top, prefix, top)
        for path in _walk(top):
            rel = PurePosixPath(path.relative_to(top).as_posix())
            if rel not in leave_out and not _git_lock(rel):
                self.add(path, f"{prefix}/{rel}", top)


def _git_lock(rel: PurePosixPath) -> bool:
    """A lock git holds while it writes (`.git/index.lock`, a ref's): a checkpoint taken meanwhile leaves it
    out, or the restored checkout would refuse every git command."""
    return rel.parts[:1] == (".git",) and rel.name.endswith(".lock")


def _borrowed(workspace: Path) -> list[Path]:
    """The object folders a checkout's `.git` borrows from (its `alternates`), if any."""
    objects = workspace / ".git" / "objects"
    try:
        lines = (objects / "info" / "alternates").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            path = Path(line) if os.path.isabs(line) else objects / line
            if path.is_dir():
                found.append(path.resolve())
    return found


def capture(
    place: Place, session_files: list[Path] | None, manifest: dict[str, Any], max_bytes: int
) -> tuple[bytes, dict[str, Any]]:
    """The archive of `place` and its manifest (`manifest` with what it holds); TooLarge past `max_bytes`.
    `session_files`: the CLI's, under `place.home` (None or empty: no session carried, nor its record).
    Blocking: call it in a thread."""
    out = _Capped(max_bytes)
    holds: dict[str, Any] = {"workspace": False, "home": [], "records": []}
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=COMPRESS_LEVEL) as tar:
        archive = _Archive(tar)
        if place.workspace.is_dir():
            borrowed = _borrowed(place.workspace)
            archive.tree(place.workspace, WORKSPACE, leave_out=frozenset({ALTERNATES} if borrowed else ()))
            for objects in borrowed:  # the borrowed objects made the checkout's own
                for path in _walk(objects):
                    rel = path.relative_to(objects).as_posix()
                    if not rel.startswith("info"):
                        archive.add(path, f"{WORKSPACE}/.git/objects/{rel}", objects)
            holds["workspace"] = True
        for path in session_files or ():
            if place.home not in path.parents:
                continue
            rel = path.relative_to(place.home).as_posix()
            before = len(archive.names)
            if path.is_dir():
                archive.tree(path, f"{HOME}/{rel}")
            else:
                archive.add(path, f"{HOME}/{rel}", path.parent)
            if len(archive.names) > before:
                holds["home"].append(rel)
        for name, path in place.records.items():
            if name == "session" and not holds["home"]:
                continue  # a session record without the session's files would resume nothing
            if path.is_file():
                archive.add(path, f"{RECORDS}/{name}.json", path.parent)
                holds["records"].append(name)
        skipped = archive.skipped
    data = out.buffer.getvalue()
    return data, {
        **manifest,
        "version": VERSION,
        "workspace": str(place.workspace),
        "holds": holds,
        "skipped": skipped[:100],
        "bytes": len(data),
    }


def _check(members: list[tarfile.TarInfo]) -> None:
    """CheckpointError for a member no archive of ours holds: outside the three folders, absolute, `..`."""
    for m in members:
        path = PurePosixPath(m.name)
        if path.is_absolute() or ".." in path.parts:
            raise CheckpointError(f"the archive's member {m.name!r} points outside its folder")
        if not path.parts or path.parts[0] not in (WORKSPACE, HOME, RECORDS):
            raise CheckpointError(f"the archive holds {m.name!r}, which no checkpoint holds")
        if m.issym() or m.islnk():
            base = os.path.dirname(m.name) if m.issym() else ""
            target = PurePosixPath(os.path.normpath(os.path.join(base, m.linkname)))
            if os.path.isabs(m.linkname) or target.parts[:1] != path.parts[:1]:
                raise CheckpointError(f"the archive's link {m.name!r} points outside its folder")


def _unpack(data: bytes, into: Path) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            _check(members)
            tar.extractall(into, members=members, filter="data")
    except CheckpointError:
        raise
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise CheckpointError(f"its archive cannot be read: {exc}") from None


def _move(source: Path, dest: Path, root: Path) -> None:
    """`source` in place of `dest` (a folder replaced whole), never outside `root`."""
    if root not in dest.parents:
        raise CheckpointError(f"{dest} is outside the principal's folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir() and not dest.is_symlink():
        old = source.parent / f".old-{dest.name}"
        os.replace(dest, old)
    os.replace(source, dest)


def restore(
    data: bytes, place: Place, session_place: Callable[[PurePosixPath], PurePosixPath]
) -> dict[str, Any]:
    """Put the archive's parts in `place` (the module docstring); `session_place` maps a session file's path
    in the old HOME to its path in this one. CheckpointError for an archive that cannot be used (nothing
    restored then); OSError when this machine cannot write it. Blocking: call it in a thread."""
    place.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".restore-", dir=place.root))
    try:
        _unpack(data, tmp)
        done: dict[str, Any] = {"workspace": False, "home": [], "records": []}
        if (tmp / WORKSPACE).is_dir():
            _move(tmp / WORKSPACE, place.workspace, place.root)
            done["workspace"] = True
        home = tmp / HOME
        if home.is_dir():
            for path in _walk(home):
                if path.is_dir() and not path.is_symlink():
                    continue
                rel = PurePosixPath(path.relative_to(home).as_posix())
                dest = place.home / session_place(rel)
                _move(path, dest, place.root)
                done["home"].append(str(rel))
        for name, dest in place.records.items():
            source = tmp / RECORDS / f"{name}.json"
            if source.is_file():
                _move(source, dest, place.root)
                done["records"].append(name)
            else:
                dest.unlink(missing_ok=True)  # the checkpoint's state: e.g. no session to resume
        return done
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Checkpointed(Protocol):
    """What a run tells its checkpoints (`CliRun`)."""

    adapter: str
    options: AgentOptions
    workspace: Path

    def session_id(self) -> str | None: ...

    def session_files(self, home: Path, session_id: str) -> list[Path] | None: ...

    def session_place(self, rel: PurePosixPath, home: Path) -> PurePosixPath: ...

    def session_restored(self, home: Path) -> None: ...


class RunCheckpoints:
    """One run's checkpoints in its task's store: saved one at a time, never failing the task."""

    def __init__(self, store: CheckpointStore, run: Checkpointed, principal: str, context_id: str) -> None:
        self.store = store
        self.run = run
        self.principal = principal
        self.context_id = context_id
        self.saved = 0
        """How many checkpoints this run saved."""
        self._lock = asyncio.Lock()

    def place(self) -> Place:
        r = self.run
        return Place.of(r.options, r.adapter, self.principal, self.context_id, r.workspace)

    def _capture(self) -> tuple[bytes, dict[str, Any]]:
        place = self.place()
        sid = self.run.session_id()
        files = self.run.session_files(place.home, sid) if sid else None
        manifest = {"adapter": self.run.adapter, "sessionId": sid if files else None}
        return capture(place, files, manifest, self.store.max_bytes)

    async def save(self, why: str) -> bool:
        """Save the run's checkpoint now (`why` for the log); False when it was not saved: too large (the
        task then cannot resume), or the store or the disk failed (a warning, the task goes on)."""
        async with self._lock:
            try:
                data, manifest = await asyncio.to_thread(self._capture)
                await self.store.save(data, manifest)
            except TooLarge as exc:
                log.warning("checkpoint (%s) of a %s run not saved: %s", why, self.run.adapter, exc)
                return False
            except Exception as exc:  # a store or disk failure never fails the task
                log.warning("checkpoint (%s) of a %s run failed: %s", why, self.run.adapter, exc)
                return False
            self.saved += 1
            log.info("checkpoint (%s) saved: %d bytes", why, manifest["bytes"])
            return True

    async def every(self, period_s: float, idle: Callable[[], bool]) -> None:
        """Save every `period_s` until cancelled (while the CLI runs), but while `idle()`: a CLI waiting
        for the user's answer changes nothing, and the end of its turn was saved."""
        while True:
            await asyncio.sleep(period_s)
            if not idle():
                await self.save("periodic")

    async def restore(self, point: Checkpoint) -> dict[str, Any]:
        """Restore `point` here (`restore`); CheckpointError or OSError as there."""
        async with self._lock:
            return await asyncio.to_thread(self._restore, point.data)

    def _restore(self, data: bytes) -> dict[str, Any]:
        place = self.place()
        done = restore(data, place, lambda rel: self.run.session_place(rel, place.home))
        if done["home"]:
            self.run.session_restored(place.home)
        return done
