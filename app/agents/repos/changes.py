"""What a task changed in its checkout, collected when a turn ends.

`head` records where a turn starts. `collect` first commits what the agent left uncommitted (untracked
files too, as `.gitignore` says) as one commit of the server's, so that every change of the task is in a
commit on its branch; then it measures the task (base..HEAD) and the turn (its start..HEAD): each a patch
that `git apply` takes (`git diff --binary`), its files with their status and line counts, and its commits.
A patch over the caller's limit is shown cut at a line end with a note saying so; the whole patch stays in
`Diff.patch`. Every command runs on the checkout as `git.Worktree` runs them (the agent wrote `.git` too).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .cache import SHA, Checkout
from .errors import RepoError
from .git import DIFF_FLAGS, SERVER_EMAIL, TIMEOUT_S, Launcher, Worktree

DEFAULT_MESSAGE = "Work of the task"
SUBJECT_CHARS = 72
BODY_CHARS = 4000
CUT_NOTE = "\n[diff cut: the first {shown} of {total} bytes are shown here; the full patch is kept whole]\n"
STATUS = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "T": "type changed",
    "U": "unmerged",
}
"""`git diff --name-status` letters in words; a letter not here is kept as it is."""


@dataclass(frozen=True)
class FileChange:
    """One file of a diff."""

    path: str
    status: str
    """added, modified, deleted, renamed, ... (STATUS)."""
    added: int | None
    """Lines added; None for a binary file."""
    deleted: int | None
    old_path: str | None = None
    """Where a renamed or copied file was."""

    @property
    def binary(self) -> bool:
        return self.added is None


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    author: str
    """`Name <email>`."""

    @property
    def by_server(self) -> bool:
        """The server's commit of work the agent left uncommitted."""
        return self.author.endswith(f"<{SERVER_EMAIL}>")


@dataclass(frozen=True)
class Diff:
    """The change from one commit to another."""

    start: str
    end: str
    patch: bytes
    """All of it, as `git diff --binary` prints it: `git apply` takes it."""
    shown: bytes
    """The patch, or its first part (cut at a line end, within the limit) and CUT_NOTE."""
    files: tuple[FileChange, ...]
    commits: tuple[Commit, ...]
    """From the oldest; those reachable from `end` and not from `start`."""

    @property
    def cut(self) -> bool:
        return self.shown is not self.patch

    @property
    def text(self) -> str:
        """What to show: `shown` as text (bytes that are not UTF-8 replaced)."""
        return self.shown.decode("utf-8", "replace")


@dataclass(frozen=True)
class Changes:
    """A turn's end: the task's change and the turn's."""

    base: str
    head: str
    committed: str | None
    """The server's commit of this turn's uncommitted work; None when there was none."""
    task: Diff
    """From the base the task started from."""
    turn: Diff
    """From the head this turn started at (`since`)."""


def commit_message(text: str) -> str:
    """The message of the server's commit, from a task's text: its first line (shortened to SUBJECT_CHARS)
    as the subject, the text (up to BODY_CHARS) below it; DEFAULT_MESSAGE when it has no text."""
    text = text.strip()
    if not text:
        return DEFAULT_MESSAGE
    subject = text.splitlines()[0].strip()
    if len(subject) > SUBJECT_CHARS:
        subject = subject[: SUBJECT_CHARS - 3].rstrip() + "..."
    body = text if len(text) <= BODY_CHARS else text[:BODY_CHARS].rstrip() + "\n[...]"
    return subject if body == subject else f"{subject}\n\n{body}"


def cut(patch: bytes, limit: int) -> bytes:
    """`patch` when it has at most `limit` bytes, else its lines within `limit` and CUT_NOTE (the very
    patch object when whole, so `Diff.cut` tells)."""
    if len(patch) <= limit:
        return patch
    end = patch.rfind(b"\n", 0, limit) + 1 or limit
    return patch[:end] + CUT_NOTE.format(shown=end, total=len(patch)).encode()


async def head(checkout: Checkout, *, launcher: Launcher | None = None, timeout_s: float = TIMEOUT_S) -> str:
    """The commit the checkout is at: recorded when a turn starts, for `collect`'s `since`."""
    return await _head(Worktree(checkout.path, launcher=launcher, timeout_s=timeout_s))


async def collect(
    checkout: Checkout,
    since: str | None,
    message: str,
    max_diff_bytes: int,
    *,
    launcher: Launcher | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Changes:
    """Commit the turn's uncommitted work (`message`; see `commit_message`), then the task's and the turn's
    change (module docstring). `since`: `head` at the turn's start, None for the first turn (the base).
    `launcher`: the task's jail, so that these commands can do no more than the agent could."""
    if max_diff_bytes <= 0:
        raise ValueError("max_diff_bytes must be greater than 0")
    start = since or checkout.base
    for rev in (checkout.base, start):
        if not SHA.fullmatch(rev):
            raise RepoError(f"{rev!r} is not a full commit id")
    tree = Worktree(checkout.path, launcher=launcher, timeout_s=timeout_s)
    committed = await _commit(tree, message)
    end = await _head(tree)
    task = await _diff(tree, checkout.base, end, max_diff_bytes)
    turn = task if start == checkout.base else await _diff(tree, start, end, max_diff_bytes)
    return Changes(checkout.base, end, committed, task, turn)


async def _commit(tree: Worktree, message: str) -> str | None:
    """Commit everything in the checkout (what .gitignore leaves out aside) as the server; its id, None when
    nothing was left uncommitted."""
    tree.check()
    with contextlib.suppress(FileNotFoundError):
        # The lock of a git the agent ran and that was killed with it (no agent runs now): not ours to keep.
        (tree.git_dir / "index.lock").unlink()
    await tree.git("add", "--all")
    staged = await tree.git("diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv", ok=(0, 1))
    if staged.code == 0:
        return None
    text = (message.strip() or DEFAULT_MESSAGE).encode()
    await tree.git(
        "commit", "--quiet", "--no-verify", "--no-gpg-sign", "--cleanup=whitespace", "--file=-", input=text
    )
    return await _head(tree)


async def _head(tree: Worktree) -> str:
    found = await tree.git("rev-parse", "--verify", "HEAD^{commit}")
    sha = found.text.strip()
    if not SHA.fullmatch(sha):
        raise RepoError(f"the checkout's HEAD is not a commit ({sha[:80]!r})")
    return sha


async def _diff(tree: Worktree, start: str, end: str, limit: int) -> Diff:
    patch = (await tree.git("diff", "--binary", *DIFF_FLAGS, start, end, "--")).out
    return Diff(
        start, end, patch, cut(patch, limit), await _files(tree, start, end), await _commits(tree, start, end)
    )


async def _files(tree: Worktree, start: str, end: str) -> tuple[FileChange, ...]:
    """`--name-status` for the status, `--numstat` for the counts, matched by path."""
    names = (await tree.git("diff", "--name-status", "-z", *DIFF_FLAGS, start, end, "--")).out.split(b"\0")
    counts: dict[str, tuple[int | None, int | None]] = {}
    numstat = iter(
        (await tree.git("diff", "--numstat", "-z", *DIFF_FLAGS, start, end, "--")).out.split(b"\0")
    )
    for record in numstat:
        if not record:
            continue
        added, deleted, path = record.split(b"\t", 2)
        if not path:  # a rename: the old path and the new one follow
            next(numstat)
            path = next(numstat)
        counts[_name(path)] = (None, None) if added == b"-" else (int(added), int(deleted))
    out: list[FileChange] = []
    tokens = iter(names)
    for letters in tokens:
        if not letters:
            continue
        letter = letters.decode()[0]
        old = _name(next(tokens)) if letter in "RC" else None
        path = _name(next(tokens))
        added, deleted = counts.get(path, (None, None))
        out.append(FileChange(path, STATUS.get(letter, letter), added, deleted, old))
    return tuple(out)


async def _commits(tree: Worktree, start: str, end: str) -> tuple[Commit, ...]:
    form = "--format=%H%x1f%an <%ae>%x1f%s"
    found = await tree.git("log", "-z", "--reverse", "--no-decorate", form, f"{start}..{end}", "--")
    out = []
    for record in found.out.split(b"\0"):
        if record:
            sha, author, subject = record.decode("utf-8", "replace").split("\x1f", 2)
            out.append(Commit(sha, subject, author))
    return tuple(out)


def _name(path: bytes) -> str:
    """A path as git printed it (`-z`: unquoted), for showing."""
    return path.decode("utf-8", "replace")
