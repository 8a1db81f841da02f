"""What a turn changed, on real git: the server's commit of the uncommitted work, the task's and the turn's
patches (which `git apply` takes, binary files included), their files and commits, the cut, and a checkout
whose `.git` the agent rewrote to run its own commands in the server's git."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import pytest

from app.agents.repos.cache import Checkout, RepoCache
from app.agents.repos.changes import CUT_NOTE, FileChange, collect, commit_message, cut, head
from app.agents.repos.errors import RepoError
from app.agents.repos.source import RepoSource

from .conftest import BINARY, Origin, git, tree_of

BRANCH = "a2a/0123abcd"
BIG = 1 << 20


def agent_turn_one(ws: Path) -> None:
    """What an agent does in its first turn: commits part of its work itself, leaves the rest."""
    (ws / "src" / "app.py").write_text("def main():\n    return 2\n\n\ndef helper():\n    return 3\n")
    git("commit", "--quiet", "-am", "agent: change main", cwd=ws)
    (ws / "old.txt").unlink()
    (ws / "notes.md").write_text("new text\n")
    (ws / "image.png").write_bytes(BINARY[::-1] + b"\0tail")
    (ws / "logo.bin").write_bytes(BINARY + b"\x00more")
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    os.rename(ws / "moved.txt", ws / "renamed.txt")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"ignored by .gitignore")


async def test_the_task_patch_rebuilds_the_agents_tree_byte_for_byte(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    start = await head(co)
    assert start == co.base
    agent_turn_one(co.path)
    changes = await collect(co, start, "Add notes\n\nAs asked.", BIG)

    assert changes.committed is not None and changes.head == changes.committed
    assert git("rev-parse", "HEAD", cwd=co.path) == changes.head
    assert git("status", "--porcelain", cwd=co.path) == "", "everything is committed"
    assert git("symbolic-ref", "--short", "HEAD", cwd=co.path) == BRANCH
    assert [(c.subject, c.author, c.by_server) for c in changes.task.commits] == [
        ("agent: change main", "Tester <tester@example.com>", False),
        ("Add notes", "a2a-server <a2a-server@localhost>", True),
    ]
    assert git("log", "-1", "--format=%B", cwd=co.path) == "Add notes\n\nAs asked."
    assert changes.turn == changes.task and not changes.task.cut

    fresh = await cache.checkout(RepoSource(origin.url, co.base), tmp_path / "fresh", "a2a/fresh000")
    git("apply", "--index", cwd=fresh.path, input=changes.task.patch)
    leave_out = (".git", "build")
    assert tree_of(fresh.path, leave_out) == tree_of(co.path, leave_out)
    assert git("write-tree", cwd=fresh.path) == git("rev-parse", "HEAD^{tree}", cwd=co.path)

    assert sorted(changes.task.files, key=lambda f: f.path) == [
        FileChange("image.png", "added", None, None),
        FileChange("logo.bin", "modified", None, None),
        FileChange("notes.md", "added", 1, 0),
        FileChange("old.txt", "deleted", 0, 1),
        FileChange("renamed.txt", "renamed", 0, 0, old_path="moved.txt"),
        FileChange("run.sh", "added", 2, 0),
        FileChange("src/app.py", "modified", 5, 1),
    ]
    assert changes.task.files[0].binary or any(f.binary for f in changes.task.files)


async def test_the_second_turn_holds_only_its_own_change(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    agent_turn_one(co.path)
    first = await collect(co, None, "turn one", BIG)
    again = await cache.checkout(source, co.path, BRANCH)
    start = await head(again)
    assert start == first.head
    (co.path / "README.md").write_text("# Project\n\nTurn two.\n")
    second = await collect(again, start, "turn two", BIG)
    assert [f.path for f in second.turn.files] == ["README.md"]
    assert [c.subject for c in second.turn.commits] == ["turn two"]
    assert b"Turn two." in second.turn.patch and b"notes.md" not in second.turn.patch
    assert (second.turn.start, second.turn.end) == (first.head, second.head)
    assert {f.path for f in second.task.files} == {f.path for f in first.task.files} | {"README.md"}
    assert [c.subject for c in second.task.commits] == ["agent: change main", "turn one", "turn two"]
    fresh = await cache.checkout(RepoSource(origin.url, co.base), tmp_path / "fresh", "a2a/fresh000")
    git("apply", cwd=fresh.path, input=first.task.patch)
    git("apply", cwd=fresh.path, input=second.turn.patch)
    assert tree_of(fresh.path, (".git", "build")) == tree_of(co.path, (".git", "build"))


async def test_a_turn_that_changed_nothing_commits_nothing(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "build").mkdir()
    (co.path / "build" / "cache.bin").write_bytes(b"ignored")
    changes = await collect(co, None, "nothing", BIG)
    assert changes.committed is None and changes.head == co.base
    assert (changes.task.patch, changes.task.files, changes.task.commits) == (b"", (), ())


async def test_a_diff_over_the_limit_is_cut_with_a_note_and_kept_whole(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "big.txt").write_text("".join(f"line {i}\n" for i in range(2000)))
    changes = await collect(co, None, "big", 1000)
    task = changes.task
    assert task.cut and len(task.patch) > 10_000
    body = task.shown.partition(b"\n[diff cut:")[0]
    assert len(body) <= 1000 and body.endswith(b"+line 97\n") and task.patch.startswith(body)
    assert task.shown == body + CUT_NOTE.format(shown=len(body), total=len(task.patch)).encode()
    assert task.files == (FileChange("big.txt", "added", 2000, 0),)
    fresh = await cache.checkout(RepoSource(origin.url, co.base), tmp_path / "fresh", "a2a/fresh000")
    git("apply", cwd=fresh.path, input=task.patch)
    assert (fresh.path / "big.txt").read_bytes() == (co.path / "big.txt").read_bytes()
    whole = await collect(co, None, "big", len(task.patch))
    assert not whole.task.cut and whole.task.shown is whole.task.patch


def test_cut_keeps_whole_lines_and_says_how_much() -> None:
    patch = b"aaaa\nbbbb\ncccc\n"
    assert cut(patch, 15) is patch
    assert cut(patch, 12) == b"aaaa\nbbbb\n" + CUT_NOTE.format(shown=10, total=15).encode()
    assert cut(b"x" * 50, 10).startswith(b"x" * 10 + b"\n[diff cut")


def test_commit_message_is_the_tasks_first_line_and_its_text() -> None:
    assert commit_message("  Fix the parser  ") == "Fix the parser"
    assert commit_message("Fix it\nplease, all of it") == "Fix it\n\nFix it\nplease, all of it"
    long = commit_message("x" * 100)
    assert long.split("\n")[0] == "x" * 69 + "..."
    assert commit_message("   ") == "Work of the task"


async def test_a_checkout_the_agent_rigged_runs_nothing_of_its_in_the_servers_git(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    """Hooks, fsmonitor, a filter driver, external diff and textconv drivers, signature checks and a
    work tree elsewhere, all set by the agent in the checkout's own config: the server's commands run none
    of them and commit only the checkout's files."""
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    marks = tmp_path / "marks"
    marks.mkdir()
    elsewhere = tmp_path / "server-secrets"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("the server's\n")
    hooks = co.path / ".git" / "hooks"
    for hook in ("pre-commit", "post-commit", "commit-msg", "prepare-commit-msg", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (hooks / hook).chmod(0o755)
    rigged = {
        "core.fsmonitor": f"touch {marks}/fsmonitor; false",
        "filter.evil.clean": f"touch {marks}/clean; cat",
        "filter.evil.smudge": f"touch {marks}/smudge; cat",
        "filter.evil.process": f"touch {marks}/process",
        "filter.evil.required": "true",
        "filter.we=ird.clean": f"touch {marks}/weird-clean; cat",
        "diff.external": f"touch {marks}/external",
        "diff.evil.textconv": f"touch {marks}/textconv; cat",
        "log.showSignature": "true",
        "gpg.program": f"{marks}/gpg",
        "commit.gpgSign": "true",
        "core.worktree": str(elsewhere),
        "core.pager": f"touch {marks}/pager; cat",
        "color.ui": "always",
        "diff.noprefix": "true",
    }
    for key, value in rigged.items():
        git("config", key, value, cwd=co.path)
    (co.path / ".gitattributes").write_text("* filter=evil diff=evil\n*.md filter=we=ird\n")
    (co.path / "README.md").write_text("changed\n")
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "rigged", BIG)
    assert sorted(os.listdir(marks)) == []
    assert {f.path for f in changes.task.files} == {".gitattributes", "README.md", "notes.md"}
    assert b"secret" not in changes.task.patch and b"\x1b[" not in changes.task.patch
    assert b"--- a/README.md\n+++ b/README.md" in changes.task.patch


async def test_a_git_folder_the_agent_swapped_for_a_link_or_a_file_is_refused(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    other = await cache.checkout(source, tmp_path / "other", "a2a/other000")
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    os.rename(co.path / ".git", tmp_path / "moved-git")
    os.symlink(other.path / ".git", co.path / ".git")
    with pytest.raises(RepoError, match=r"\.git is not a folder"):
        await collect(co, None, "x", BIG)
    os.unlink(co.path / ".git")
    (co.path / ".git").write_text(f"gitdir: {other.path / '.git'}\n")
    with pytest.raises(RepoError, match=r"\.git is not a folder"):
        await head(co)
    assert git("log", "--format=%s", cwd=other.path) == "second\nfirst", "the other checkout is untouched"


async def test_a_stale_index_lock_of_a_killed_git_does_not_stop_the_commit(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / ".git" / "index.lock").write_bytes(b"")
    (co.path / "new.txt").write_text("x\n")
    assert (await collect(co, None, "x", BIG)).committed is not None


async def test_since_and_base_must_be_commit_ids(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    with pytest.raises(RepoError, match="not a full commit id"):
        await collect(co, "--output=/tmp/x", "x", BIG)
    rigged = Checkout(co.path, co.source, co.branch, "--output=/tmp/x")
    with pytest.raises(RepoError, match="not a full commit id"):
        await collect(rigged, None, "x", BIG)
    assert stat.S_ISDIR(os.stat(co.path).st_mode)


async def test_every_command_on_the_checkout_goes_through_the_launcher_it_is_given(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    """The wiring gives the task's jail: each command then runs with the agent's rights, under the same
    overrides and with no transport allowed."""
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    seen: list[tuple[list[str], dict[str, str]]] = []

    def launcher(argv: list[str], env: Mapping[str, str]) -> list[str]:
        seen.append((argv, dict(env)))
        return argv

    start = await head(co, launcher=launcher)
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, start, "notes", BIG, launcher=launcher)
    assert changes.committed is not None and len(seen) >= 8
    commands = {next(a for a in argv[1:] if not a.startswith("-")) for argv, _ in seen}
    assert {"rev-parse", "config", "add", "diff", "commit", "log"} <= commands
    for argv, env in seen:
        assert argv[:3] == ["git", f"--git-dir={co.path / '.git'}", f"--work-tree={co.path}"]
        assert env["GIT_ALLOW_PROTOCOL"] == "" and env["GIT_CONFIG_KEY_0"] == "core.hooksPath"
