"""Real repositories for the repos package: a bare `origin` served over file://, made with the `git` binary in
the test's own folder, with a main branch, a `dev` branch, an annotated tag and a commit of its own."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.agents.repos.cache import RepoCache
from app.agents.repos.source import RepoSource

ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_COMMITTER_NAME": "Tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
}
BINARY = bytes(range(256)) * 8
"""A file git finds binary (NUL bytes)."""


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    """The test's own git (the agent's, the operator's), not the package's: its output, failing loudly."""
    done = subprocess.run(["git", *args], cwd=cwd, env=ENV, input=input, capture_output=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout.decode().strip()


def commit_all(work: Path, message: str) -> str:
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def tree_of(root: Path, leave_out: tuple[str, ...] = (".git",)) -> dict[str, tuple[bytes, bool]]:
    """Every file under `root` but `leave_out` (top-level names): its bytes (a link's target) and whether it
    is executable."""
    out: dict[str, tuple[bytes, bool]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in leave_out or (path.is_dir() and not path.is_symlink()):
            continue
        if path.is_symlink():
            out[str(rel)] = (os.readlink(path).encode(), False)
        else:
            out[str(rel)] = (path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return out


@dataclass
class Origin:
    """The remote: a bare repository, and a clone of it to push new commits from."""

    bare: Path
    work: Path
    first: str
    """main's first commit."""
    main: str
    dev: str
    tag: str
    """The commit tag v1 (annotated) points at: `first`."""

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def add_commit(self, name: str, text: str, branch: str = "main") -> str:
        git("checkout", "--quiet", branch, cwd=self.work)
        (self.work / name).write_text(text)
        sha = commit_all(self.work, f"add {name}")
        git("push", "--quiet", "origin", branch, cwd=self.work)
        return sha


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    bare = tmp_path / "remote" / "project.git"
    work = tmp_path / "remote-work"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("init", "--quiet", "--initial-branch=main", str(work))
    (work / "README.md").write_text("# Project\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("def main():\n    return 1\n")
    (work / "old.txt").write_text("to be deleted\n")
    (work / "moved.txt").write_text("a file that moves\n" * 20)
    (work / "logo.bin").write_bytes(BINARY)
    (work / ".gitignore").write_text("build/\n")
    first = commit_all(work, "first")
    git("tag", "-a", "v1", "-m", "version 1", cwd=work)
    (work / "CHANGES.md").write_text("- second\n")
    main = commit_all(work, "second")
    git("checkout", "--quiet", "-b", "dev", cwd=work)
    (work / "dev.txt").write_text("on dev\n")
    dev = commit_all(work, "on dev")
    git("checkout", "--quiet", "main", cwd=work)
    git("remote", "add", "origin", str(bare), cwd=work)
    git("push", "--quiet", "origin", "main", "dev", "v1", cwd=work)
    return Origin(bare, work, first, main, dev, first)


@pytest.fixture
def cache(tmp_path: Path) -> RepoCache:
    return RepoCache(tmp_path / "cache", timeout_s=60)


@pytest.fixture
def source(origin: Origin) -> RepoSource:
    return RepoSource(origin.url)
