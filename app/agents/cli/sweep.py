"""The workspace sweep: each process that runs CLI agents removes, from its own AGENT_WORKSPACE_ROOT, the
workspaces of contexts that have ended, and measures what the workspaces and the repository cache hold.

Every replica and remote worker has a disk of its own, so none can clean another's: each sweeps its own
root now and then (`Sweep.open`, every RETENTION_INTERVAL_S), and `a2a-server prune` sweeps the root of the
machine it runs on. A run marks its workspace as its context's before touching it (`in_use`: a file
`<principal>/.contexts/<folder>.json` beside the workspaces, out of the jail, naming the owner and the
context) and holds a shared `flock` on that mark for the whole run. The sweep reads the marks, asks the
store about their contexts (`Contexts`: a task not ended yet, and the last status time), and removes a
workspace whose context has no task left, or whose last task ended before the cutoff
(TASK_RETENTION_DAYS), and never one whose context has a task running or waiting for input. It removes
only under an exclusive `flock` on the mark, taken without waiting (a run holding it keeps its workspace),
after asking the store again. A workspace with no mark (made before marks were written, or by hand) is
never removed: it is counted, and left to the operator.

A checkout's work outlives its folder: before the folder goes, the mirror fetches the checkout's HEAD into
`refs/a2a/kept/<branch>/<when>` (UTC, `YYYYmmddTHHMMSSZ`), a namespace the mirror's `fetch --prune` never
touches (it fetches only branches and tags). The kept refs are pruned by the same sweep one more retention
period after the folder went; git's own gc then drops their objects. The mirror fetches from the checkout
as `repos.push` does: `upload-pack` serves a repository it does not trust without running anything of it.

The sizes (disk blocks, each file once) are measured by the sweep, in a thread, and kept for `/metrics`: a
scrape never walks the trees.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app import background
from app.protocol.model import iso, utcnow

from ..repos.cache import RepoCache
from ..repos.errors import RepoError
from ..repos.git import run
from .repository import recorded

log = logging.getLogger(__name__)

MARKS = ".contexts"
"""The folder of a principal's root (beside its workspaces) where each workspace's mark is."""
SESSIONS = ".sessions"
LEDGERS = ".repos"
"""The contexts' recorded sources (`repository.recorded`), removed with their workspaces."""
KEPT = "refs/a2a/kept/"
"""Where a removed checkout's work is kept in its mirror."""
STAMP = "%Y%m%dT%H%M%SZ"
_STAMP = re.compile(r"\d{8}T\d{6}Z")
LOCK_POLL_S = 0.05
QUERY_CHUNK = 200
"""Contexts asked about in one query."""
START_DELAY_S = 30.0

Key = tuple[str, str]
"""(owner, context id)."""
Contexts = Callable[[Sequence[Key]], Awaitable[Mapping[Key, tuple[int, str]]]]
"""The store's answer for some contexts: per context that still has tasks, how many have not ended and the
time of its last status (ISO-8601, as stored); a context with no task left is not in it."""


@dataclass(frozen=True)
class Mark:
    """Whose context a workspace is, as its run wrote it."""

    owner: str
    context_id: str


@dataclass
class Report:
    """What one sweep did (or, dry, would do)."""

    removed: int = 0
    freed_bytes: int = 0
    """Disk the removed workspaces held."""
    workspaces: int = 0
    """Workspaces left, with or without a mark."""
    workspace_bytes: int = 0
    """Disk the workspaces left hold."""
    unmarked: int = 0
    """Workspaces left because no run marked them (never removed)."""
    busy: int = 0
    """Removable workspaces left: a run held them, a new task came, or they could not be removed (the
    next sweep tries again)."""
    kept_refs: int = 0
    """Checkouts whose HEAD went into their mirror's `refs/a2a/kept/`."""
    kept_refs_pruned: int = 0
    cache_bytes: int = 0
    """Disk the repository cache holds (the mirrors)."""


@contextlib.asynccontextmanager
async def in_use(workspace: Path, owner: str, context_id: str) -> AsyncIterator[None]:
    """Mark `workspace` as the context's and hold it for the block (a shared flock on the mark), so that
    no sweep removes it meanwhile; a sweep's removal in progress is waited for."""
    marks = workspace.parent / MARKS
    marks.mkdir(parents=True, exist_ok=True)
    mark = marks / f"{workspace.name}.json"
    fd = await _locked(mark, fcntl.LOCK_SH, wait=True)
    assert fd is not None
    try:
        if os.fstat(fd).st_size == 0:
            os.write(fd, json.dumps({"owner": owner, "contextId": context_id}).encode())
        yield
    finally:
        os.close(fd)


async def _locked(path: Path, how: int, *, wait: bool) -> int | None:
    """An open descriptor of `path` holding flock `how` on the file that is at `path` now (a mark the
    sweep unlinked meanwhile is made again when waiting: a run's); None when not `wait` and another holds
    it, or it is gone (another sweep removed its workspace)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if wait else 0), 0o600)
        except FileNotFoundError:
            return None
        try:
            while True:  # polled, not waited for in a thread: a cancelled wait must not keep a lock
                try:
                    fcntl.flock(fd, how | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not wait:
                        os.close(fd)
                        return None
                    await asyncio.sleep(LOCK_POLL_S)
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


def disk_bytes(root: Path) -> int:
    """The disk blocks under `root` in bytes, each file once (hard links), links not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            st = os.lstat(here)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(here) as entries:
                    stack.extend(Path(e.path) for e in entries)
            except OSError:
                continue
    return total


def remove_tree(path: Path) -> None:
    """`shutil.rmtree`, through the folders an agent left without write permission (a tool's read-only
    cache): each is made writable by its owner, this process, and the removal tried again."""

    def retry(func: Callable[..., object], failed: str, _exc: object) -> None:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile, by the retry below
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            if func is os.open or func is os.scandir:  # a folder that could not be listed
                if not stat.S_ISDIR(os.lstat(failed).st_mode):
                    raise OSError(errno.ENOTDIR, "not a folder any more", failed)
                os.chmod(failed, stat.S_IRWXU)
                shutil.rmtree(failed, onerror=retry)
            else:
                func(failed)

    shutil.rmtree(path, onerror=retry)


def read_mark(path: Path) -> Mark | None:
    """The mark at `path`; None when there is none or it is not whole (a run writing it)."""
    try:
        data = json.loads(path.read_bytes())
        return Mark(str(data["owner"]), str(data["contextId"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(eq=False)
class Sweep:
    """Sweeps the workspaces under `root` (and measures `cache`'s mirrors) now and then."""

    root: Path
    cache: RepoCache
    contexts: Contexts
    _: KW_ONLY
    retention_days: float
    """0: nothing is removed (ended tasks are kept for good); the sizes are measured still."""
    interval_s: float
    last: Report | None = field(default=None, init=False)
    """The last sweep's report (read by the metrics)."""
    last_at: float | None = field(default=None, init=False)
    removed_total: int = field(default=0, init=False)
    freed_total: int = field(default=0, init=False)
    _loop: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def open(self) -> None:
        self._loop = asyncio.create_task(self._every(), name="workspace-sweep")

    async def aclose(self) -> None:
        await background.stop(self._loop)
        self._loop = None

    async def _every(self) -> None:
        await asyncio.sleep(min(START_DELAY_S, self.interval_s))
        while True:
            try:
                cutoff = utcnow() - timedelta(days=self.retention_days) if self.retention_days else None
                await self.run_once(cutoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("workspace sweep failed; the next one tries again")
            await asyncio.sleep(self.interval_s)

    async def run_once(self, cutoff: datetime | None, dry_run: bool = False) -> Report:
        """One sweep: the workspaces of contexts ended before `cutoff` removed (with `dry_run`, only
        measured; with no cutoff, none), the kept refs older than it pruned, the sizes measured."""
        report = Report()
        found = await asyncio.to_thread(self._listed)  # listed before the store is asked (module docstring)
        marked = {path: mark for path, mark in found.items() if mark is not None}
        report.unmarked = len(found) - len(marked)
        states = await self._states([(m.owner, m.context_id) for m in marked.values()]) if cutoff else {}
        for path in found:
            mark = marked.get(path)
            if cutoff is not None and mark is not None and _ended(states, mark, cutoff):
                removed = await self._remove(path, mark, cutoff, dry_run)
                if removed is not None:
                    report.removed += 1
                    report.freed_bytes += removed[0]
                    report.kept_refs += removed[1]
                    continue
                report.busy += 1
            report.workspaces += 1
            report.workspace_bytes += await asyncio.to_thread(disk_bytes, path)
        if not dry_run:
            await self._drop_stale_marks()
        if cutoff is not None and not dry_run:
            report.kept_refs_pruned = await self._prune_kept(cutoff)
        report.cache_bytes = await asyncio.to_thread(disk_bytes, self.cache.root)
        if not dry_run:
            self.last, self.last_at = report, time.time()
            self.removed_total += report.removed
            self.freed_total += report.freed_bytes
            if report.removed:
                log.info(
                    "workspace sweep: removed %d workspaces of ended contexts, %d bytes freed",
                    report.removed,
                    report.freed_bytes,
                )
        return report

    def _listed(self) -> dict[Path, Mark | None]:
        """Every workspace under the root (`<principal>/<folder>`, dot names left out) and its mark."""
        out: dict[Path, Mark | None] = {}
        try:
            principals = [p for p in self.root.iterdir() if _folder(p)]
        except FileNotFoundError:
            return out
        for principal in sorted(principals):
            for path in sorted(p for p in principal.iterdir() if _folder(p)):
                out[path] = read_mark(principal / MARKS / f"{path.name}.json")
        return out

    async def _drop_stale_marks(self) -> None:
        """Delete the marks left without a workspace (a run whose folder was never made: its repository
        was refused), each under the exclusive lock, so never one a run holds."""
        for mark in await asyncio.to_thread(self._stale_marks):
            fd = await _locked(mark, fcntl.LOCK_EX, wait=False)
            if fd is None:
                continue
            try:
                if not (mark.parent.parent / mark.name.removesuffix(".json")).exists():
                    mark.unlink(missing_ok=True)
            finally:
                os.close(fd)

    def _stale_marks(self) -> list[Path]:
        try:
            principals = [p for p in self.root.iterdir() if _folder(p)]
        except FileNotFoundError:
            return []
        return [
            mark
            for principal in principals
            for mark in sorted((principal / MARKS).glob("*.json"))
            if not (principal / mark.name.removesuffix(".json")).exists()
        ]

    async def _states(self, keys: list[Key]) -> dict[Key, tuple[int, str]]:
        out: dict[Key, tuple[int, str]] = {}
        unique = sorted(set(keys))
        for i in range(0, len(unique), QUERY_CHUNK):
            out.update(await self.contexts(unique[i : i + QUERY_CHUNK]))
        return out

    async def _remove(
        self, path: Path, mark: Mark, cutoff: datetime, dry_run: bool
    ) -> tuple[int, bool] | None:
        """Remove the workspace at `path` (its work kept first), its mark and its sessions, if no run holds
        it and the store still says its context ended: the bytes it held and whether its work was kept;
        None when left."""
        if dry_run:
            return await asyncio.to_thread(disk_bytes, path), False
        mark_path = path.parent / MARKS / f"{path.name}.json"
        fd = await _locked(mark_path, fcntl.LOCK_EX, wait=False)
        if fd is None:
            return None
        try:
            key = (mark.owner, mark.context_id)
            if read_mark(mark_path) != mark or not _ended(await self.contexts([key]), mark, cutoff):
                return None  # a new task came meanwhile
            kept = await self._keep(path)
            size = await asyncio.to_thread(disk_bytes, path)
            try:
                await asyncio.to_thread(remove_tree, path)
            except OSError as exc:
                log.warning("workspace sweep: %s could not be removed (%s); tried again next time", path, exc)
                return None
            for session in path.parent.glob(f"{SESSIONS}/*/{path.name}.json"):
                session.unlink(missing_ok=True)
            (path.parent / LEDGERS / f"{path.name}.json").unlink(missing_ok=True)
            mark_path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        return size, kept

    async def _keep(self, path: Path) -> bool:
        """Fetch the checkout's HEAD at `path` into its mirror under `refs/a2a/kept/`: whether it was kept
        (False: no checkout there, a broken one, or no mirror any more)."""
        try:
            checkout = await self.cache.existing(path)
        except RepoError as exc:
            log.warning("workspace sweep: %s; removed without keeping its work", exc)
            return False
        if checkout is None:
            return False
        source = recorded(path.parent / LEDGERS / f"{path.name}.json") or checkout.source
        if source.url != checkout.source.url:
            log.warning(
                "workspace sweep: %s claims %s, the server recorded %s; kept in the recorded one's mirror",
                path,
                checkout.source.url,
                source.url,
            )
        if not self.cache.path(source).exists():
            return False
        ref = f"{KEPT}{checkout.branch}/{datetime.now(UTC).strftime(STAMP)}"
        fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(path), f"+HEAD:{ref}"]
        try:
            async with self.cache.locked(source) as mirror:
                await run([f"--git-dir={mirror}", *fetch], timeout_s=self.cache.timeout_s)
        except RepoError as exc:
            log.warning("workspace sweep: the work of %s was not kept (%s); removed", path, exc)
            return False
        return True

    async def _prune_kept(self, cutoff: datetime) -> int:
        """Delete the kept refs older than `cutoff` in every mirror: how many."""
        oldest = cutoff.strftime(STAMP)
        pruned = 0
        try:
            mirrors = sorted(m for m in self.cache.root.glob("*.git") if m.is_dir())
        except OSError:
            return 0
        for mirror in mirrors:
            found = await run(
                [f"--git-dir={mirror}", "for-each-ref", "--format=%(refname)", KEPT],
                timeout_s=self.cache.timeout_s,
            )
            old = [
                r for r in found.text.split() if _STAMP.fullmatch(s := r.rsplit("/", 1)[-1]) and s < oldest
            ]
            if old:
                stdin = "".join(f"delete {r}\n" for r in old).encode()
                await run(
                    [f"--git-dir={mirror}", "update-ref", "--stdin"],
                    input=stdin,
                    timeout_s=self.cache.timeout_s,
                )
                pruned += len(old)
        return pruned


def _folder(path: Path) -> bool:
    """A folder of ours to look into: a real folder, not a dot name (`.home`, `.sessions`, `.contexts`)."""
    if path.name.startswith("."):
        return False
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise


def _ended(states: Mapping[Key, tuple[int, str]], mark: Mark, cutoff: datetime) -> bool:
    """Whether the context may go: no task left, or none unfinished and the last ended before `cutoff`."""
    state = states.get((mark.owner, mark.context_id))
    if state is None:
        return True
    unfinished, last_at = state
    return unfinished == 0 and last_at < iso(cutoff)
