"""`RepoCache`: one bare mirror per repository, fetched for each new checkout and never cloned again, and
`checkout`: a context's own clone of it on the task's branch.

The mirror (`<root>/<source key>.git`) holds the remote's branches and tags and its default branch as
HEAD. It is the server's: only the server's git touches it, one command at a time per repository (an
asyncio lock in a process, `flock` on `<key>.lock` across processes). A new mirror is made in a temporary
folder and renamed into place, so a failed first fetch leaves nothing half made.

A checkout is a clone of the mirror over git's transport (`--no-local`: objects of its own, no hard links
and no `alternates` into the cache), so the jail never needs the cache; its `origin` is the real remote
(without credentials: a source never has any), and `.git/config` records the source, the ref, the task
branch and the base commit (`a2a.source`, `a2a.ref`, `a2a.branch`, `a2a.base`) for the follow-up turns,
which get the same checkout back untouched (a ref they name is not checked out again). It too is made
beside the workspace and renamed into it, and a workspace that holds anything else is never written over.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from .credentials import Credentials, fetch_auth
from .errors import RepoError
from .git import TIMEOUT_S, Done, run
from .source import RepoSource, check_ref

BRANCH_PREFIX = "a2a/"
REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
"""What a mirror keeps: branches and tags (not a forge's `refs/pull/*`, which can outnumber them)."""
ATTACHMENTS = "attachments"
"""The folder of a checkout the client's files are written to (`attachments.py`); ignored by git there
(`.git/info/exclude`), so they are never part of the task's change."""
LOCK_POLL_S = 0.05
SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
"""A full commit id (SHA-1 or SHA-256): what a recorded base must be before it goes on a command line."""


def task_branch(context_id: str) -> str:
    """The branch of a context's checkout: `a2a/` and the first 8 hex digits of its id (dashes dropped), or
    of a hash of an id that is not hex."""
    digits = context_id.replace("-", "").lower()
    if not re.fullmatch(r"[0-9a-f]{8,}", digits):
        digits = hashlib.sha256(context_id.encode()).hexdigest()
    return f"{BRANCH_PREFIX}{digits[:8]}"


@dataclass(frozen=True)
class Checkout:
    """A context's clone of a repository: where, of what, on which branch, from which commit."""

    path: Path
    source: RepoSource
    branch: str
    base: str
    """The commit the task started from: what its change is measured against."""
    created: bool = False
    """Made by this call; False: an earlier turn's, as that turn left it."""


class RepoCache:
    """The mirrors under `root` and the checkouts made from them."""

    def __init__(self, root: Path, *, timeout_s: float = TIMEOUT_S) -> None:
        self.root = root
        self.timeout_s = timeout_s
        self._locks: dict[str, asyncio.Lock] = {}

    def path(self, source: RepoSource) -> Path:
        """The mirror of `source` (which may not exist yet)."""
        return self.root / f"{source.key}.git"

    async def mirror(self, source: RepoSource, credentials: Credentials | None = None) -> Path:
        """The mirror of `source`, fetched now (made the first time) with `credentials` if the remote asks
        (`credentials.fetch_auth`); GitError when the remote fails."""
        async with self.locked(source):
            return await self._refresh(source, credentials)

    @contextlib.asynccontextmanager
    async def locked(self, source: RepoSource) -> AsyncIterator[Path]:
        """Hold the mirror of `source` alone (this process and any other on the same root): its path."""
        async with self._locks.setdefault(source.key, asyncio.Lock()):
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / f"{source.key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                while True:  # polled, not waited for in a thread: a cancelled wait must not keep a lock
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(LOCK_POLL_S)
                yield self.path(source)
            finally:
                os.close(fd)  # and the lock with it

    async def checkout(
        self, source: RepoSource, workspace: Path, branch: str, credentials: Credentials | None = None
    ) -> Checkout:
        """`workspace` as a checkout of `source` at its ref on a new `branch`, or the checkout an earlier turn
        made there; the mirror is fetched with `credentials` if the remote asks. RepoError when the
        workspace holds anything else, or a checkout of another source."""
        if branch == "HEAD" or check_ref(branch) != branch:
            raise RepoError(f"the branch name {branch!r} is not a branch name")
        found = await self._existing(source, workspace, branch)
        if found is not None:
            return found
        workspace.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{workspace.name}.", dir=workspace.parent))
        try:
            async with self.locked(source):
                mirror = await self._refresh(source, credentials)
                base = await self._resolve(mirror, source)
                await self._git(
                    "clone", "--no-local", "--no-checkout", "--quiet", "--", str(mirror), str(tmp)
                )
            here = [f"--git-dir={tmp / '.git'}", f"--work-tree={tmp}"]
            await self._git(*here, "checkout", "--quiet", "-b", branch, base, cwd=tmp)
            await self._git(*here, "remote", "set-url", "origin", source.url)
            recorded = {"source": source.url, "ref": source.ref or "", "branch": branch, "base": base}
            for key, value in recorded.items():
                await self._git(*here, "config", f"a2a.{key}", value)
            with (tmp / ".git" / "info" / "exclude").open("a") as exclude:
                exclude.write(f"/{ATTACHMENTS}/\n")
            try:
                os.rename(tmp, workspace)  # over an empty folder, or none
            except OSError as exc:
                # Filled meanwhile: by a task of the same context making the same checkout (then it is this
                # one's too), or by anything else (refused as ever).
                found = await self._existing(source, workspace, branch)
                if found is None:
                    raise RepoError(
                        f"the checkout cannot be moved into {workspace}: {exc.strerror}"
                    ) from None
                return found
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return Checkout(workspace, source, branch, base, created=True)

    async def existing(self, workspace: Path) -> Checkout | None:
        """The checkout an earlier turn made in `workspace`, whatever its source (a later turn that names
        no repository keeps its context's); None for an empty or missing workspace, or one that holds no
        checkout the server made. RepoError for a checkout that lost what the server recorded in it."""
        return await self._existing(None, workspace, None)

    async def _existing(
        self, source: RepoSource | None, workspace: Path, branch: str | None
    ) -> Checkout | None:
        """The checkout an earlier turn made in `workspace`; None for an empty or missing workspace. With
        `source` and `branch`, RepoError when it is of another."""
        try:
            if not os.listdir(workspace):
                return None
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise RepoError(f"the workspace {workspace} is a file; left as it is") from None
        config = workspace / ".git" / "config"
        recorded: dict[str, str] = {}
        if _is_dir(workspace / ".git") and _is_file(config):
            found = await self._git(
                "config", "--file", str(config), "--null", "--get-regexp", r"^a2a\.", ok=(0, 1)
            )
            for item in found.out.split(b"\0"):
                key, _, value = item.decode("utf-8", "replace").partition("\n")
                recorded[key] = value
        if "a2a.source" not in recorded:
            if source is None:
                return None
            raise RepoError(
                f"the workspace {workspace} is not empty and holds no checkout the server made; left as it is"
            )
        if source is None or branch is None:
            source = RepoSource(recorded["a2a.source"])
            branch = check_ref(recorded.get("a2a.branch") or "")
        elif (recorded["a2a.source"], recorded.get("a2a.branch")) != (source.url, branch):
            raise RepoError(
                f"this context's workspace holds a checkout of {recorded['a2a.source']} on "
                f"{recorded.get('a2a.branch')}, not of {source.url} on {branch}; a context keeps its "
                "repository"
            )
        base = recorded.get("a2a.base", "")
        if not SHA.fullmatch(base):
            raise RepoError(f"the checkout in {workspace} has lost the commit it started from (a2a.base)")
        kept = RepoSource(
            source.url, recorded.get("a2a.ref") or None
        )  # the ref it was made at, not this turn's
        return Checkout(workspace, kept, branch, base)

    async def _refresh(self, source: RepoSource, credentials: Credentials | None = None) -> Path:
        """Fetch the mirror of `source`, making it the first time; under `locked`."""
        mirror = self.path(source)
        config, env = fetch_auth(credentials, source.url)
        fetch = ("fetch", "--prune", "--quiet", "origin")
        if mirror.exists():
            await self._git(f"--git-dir={mirror}", *fetch, config=config, env=env)
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f".{source.key}.", dir=self.root))
            try:
                await self._git("init", "--bare", "--quiet", str(tmp))
                here = f"--git-dir={tmp}"
                await self._git(here, "config", "remote.origin.url", source.url)
                for refspec in REFSPECS:
                    await self._git(here, "config", "--add", "remote.origin.fetch", refspec)
                await self._git(here, "config", "gc.autoDetach", "false")  # gc within the lock, not after it
                await self._git(here, *fetch, config=config, env=env)
                os.rename(tmp, mirror)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        await self._follow_head(mirror, config, env)
        return mirror

    async def _follow_head(self, mirror: Path, config: dict[str, str], env: dict[str, str]) -> None:
        """Point the mirror's HEAD at the remote's default branch (a fetch does not)."""
        found = await self._git(
            f"--git-dir={mirror}", "ls-remote", "--symref", "origin", "HEAD", config=config, env=env
        )
        for line in found.text.splitlines():
            ref = line.removeprefix("ref: ").removesuffix("\tHEAD")
            if line.startswith("ref: refs/heads/") and line.endswith("\tHEAD") and _is_branch(ref):
                await self._git(f"--git-dir={mirror}", "symbolic-ref", "HEAD", ref)

    async def _resolve(self, mirror: Path, source: RepoSource) -> str:
        """The commit of the source's ref in the mirror (the default branch without one)."""
        rev = source.ref or "HEAD"
        found = await self._git(
            f"--git-dir={mirror}", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", ok=(0, 1)
        )
        sha = found.text.strip()
        if found.code or not SHA.fullmatch(sha):
            what = (
                f"no branch, tag or commit {source.ref!r}"
                if source.ref
                else "no commit on its default branch"
            )
            raise RepoError(f"the repository {source.url} has {what}")
        return sha

    async def _git(
        self,
        *args: str,
        cwd: Path | None = None,
        ok: tuple[int, ...] = (0,),
        config: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Done:
        return await run(args, cwd=cwd, ok=ok, config=config, env=env, timeout_s=self.timeout_s)


def _is_branch(ref: str) -> bool:
    try:
        return check_ref(ref) == ref
    except RepoError:
        return False


def _is_dir(path: Path) -> bool:
    """A folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
