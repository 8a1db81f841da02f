"""RepoCache on real git: a mirror fetched, never cloned again; a checkout per context on its branch, at a
branch, a tag or a commit, kept for the follow-up turns, standing on its own, never over a user's files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from app.agents.repos.cache import RepoCache, task_branch
from app.agents.repos.errors import GitError, RepoError
from app.agents.repos.source import RepoSource

from .conftest import Origin, git

BRANCH = "a2a/0123abcd"


def config(workspace: Path, key: str) -> str:
    return git("config", "--file", str(workspace / ".git" / "config"), key)


@pytest.mark.parametrize(
    ("ref", "expected", "file"),
    [
        (None, "main", "CHANGES.md"),
        ("dev", "dev", "dev.txt"),
        ("v1", "tag", "README.md"),
        ("first", "first", "old.txt"),
    ],
)
async def test_a_checkout_at_the_default_branch_a_branch_a_tag_and_a_commit(
    origin: Origin, cache: RepoCache, tmp_path: Path, ref: str | None, expected: str, file: str
) -> None:
    if ref == "first":
        ref = origin.first[:12]  # an abbreviated commit id
    ws = tmp_path / "ws" / "ctx"
    co = await cache.checkout(RepoSource(origin.url, ref), ws, BRANCH)
    assert co.base == getattr(origin, expected) and co.created and co.path == ws
    assert git("rev-parse", "HEAD", cwd=ws) == co.base
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == BRANCH
    assert git("status", "--porcelain", cwd=ws) == "", "a clean tree at the ref"
    assert (ws / file).is_file()
    assert (ws / "dev.txt").exists() == (expected == "dev")
    assert git("remote", "get-url", "origin", cwd=ws) == str(origin.bare), "origin is the real remote"
    assert (config(ws, "a2a.base"), config(ws, "a2a.branch")) == (co.base, BRANCH)
    assert config(ws, "a2a.source") == str(origin.bare)


async def test_the_checkout_stands_on_its_own_without_the_cache(
    origin: Origin, cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    await cache.checkout(source, ws, BRANCH)
    assert not (ws / ".git" / "objects" / "info" / "alternates").exists()
    links = [p for p in (ws / ".git" / "objects").rglob("*") if p.is_file() and os.stat(p).st_nlink > 1]
    assert links == [], "no object hard-linked with the mirror"
    os.rename(cache.root, tmp_path / "cache-gone")
    git("fsck", "--full", cwd=ws)
    assert git("log", "--format=%s", cwd=ws).splitlines() == ["second", "first"]


async def test_a_follow_up_turn_gets_the_same_checkout_untouched(
    origin: Origin, cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    first = await cache.checkout(source, ws, BRANCH)
    (ws / "README.md").write_text("edited by the agent\n")
    (ws / "new.txt").write_text("new\n")
    origin.add_commit("later.txt", "pushed meanwhile\n")
    again = await cache.checkout(RepoSource(origin.url, "dev"), ws, BRANCH)  # the ref of a follow-up: ignored
    assert again == type(first)(ws, first.source, BRANCH, first.base, created=False)
    assert again.source.ref is None and config(ws, "a2a.ref") == ""
    assert (ws / "README.md").read_text() == "edited by the agent\n" and (ws / "new.txt").exists()
    assert not (ws / "later.txt").exists() and git("rev-parse", "HEAD", cwd=ws) == first.base


async def test_a_mirror_is_fetched_not_cloned_again(
    origin: Origin, cache: RepoCache, source: RepoSource
) -> None:
    mirror = await cache.mirror(source)
    assert mirror == cache.path(source) and mirror.name == f"{source.key}.git" and len(source.key) == 16
    inode = mirror.stat().st_ino
    (mirror / "kept-by-the-second-call").write_text("")
    assert git("--git-dir", str(mirror), "rev-parse", "refs/heads/dev") == origin.dev
    later = origin.add_commit("later.txt", "new on the remote\n")
    git("push", "--quiet", "origin", "--delete", "dev", cwd=origin.work)
    again = await cache.mirror(source)
    assert again == mirror and again.stat().st_ino == inode and (mirror / "kept-by-the-second-call").exists()
    assert git("--git-dir", str(mirror), "rev-parse", "refs/heads/main") == later, "fetched"
    assert "refs/heads/dev" not in git("--git-dir", str(mirror), "for-each-ref"), "pruned"
    assert git("--git-dir", str(mirror), "symbolic-ref", "HEAD") == "refs/heads/main"
    assert sorted(p.name for p in cache.root.iterdir()) == [f"{source.key}.git", f"{source.key}.lock"]


async def test_a_new_checkout_sees_what_the_remote_got_since(
    origin: Origin, cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    await cache.checkout(source, tmp_path / "a", BRANCH)
    later = origin.add_commit("later.txt", "new\n")
    b = await cache.checkout(source, tmp_path / "b", "a2a/ffffffff")
    assert b.base == later and (tmp_path / "b" / "later.txt").exists()


async def test_the_remotes_default_branch_is_followed(
    origin: Origin, cache: RepoCache, source: RepoSource
) -> None:
    await cache.mirror(source)
    git("--git-dir", str(origin.bare), "symbolic-ref", "HEAD", "refs/heads/dev")
    mirror = await cache.mirror(source)
    assert git("--git-dir", str(mirror), "symbolic-ref", "HEAD") == "refs/heads/dev"


async def test_concurrent_calls_for_one_repository_take_turns(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    made = await asyncio.gather(*(cache.checkout(source, tmp_path / f"ws{i}", BRANCH) for i in range(4)))
    assert len({c.base for c in made}) == 1 and all(c.created for c in made)
    assert [p.name for p in cache.root.iterdir() if p.suffix == ".git"] == [f"{source.key}.git"]


async def test_a_workspace_holding_anything_else_is_refused_and_left_as_it_is(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("the user's\n")
    with pytest.raises(RepoError, match="not empty and holds no checkout the server made"):
        await cache.checkout(source, ws, BRANCH)
    assert os.listdir(ws) == ["notes.txt"]
    git("init", "--quiet", cwd=ws)  # a repository of the user's, not the server's
    with pytest.raises(RepoError, match="holds no checkout the server made"):
        await cache.checkout(source, ws, BRANCH)
    assert sorted(os.listdir(ws)) == [".git", "notes.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ws.")] == [], "no temporary clone left"


async def test_a_context_keeps_its_repository_and_branch(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    await cache.checkout(source, ws, BRANCH)
    other = tmp_path / "other.git"
    git("clone", "--quiet", "--bare", str(origin.bare), str(other))
    with pytest.raises(RepoError, match="a context keeps its repository"):
        await cache.checkout(RepoSource(str(other)), ws, BRANCH)
    with pytest.raises(RepoError, match="a context keeps its repository"):
        await cache.checkout(source, ws, "a2a/99999999")


async def test_an_empty_workspace_folder_is_used(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert (await cache.checkout(source, ws, BRANCH)).created and (ws / "README.md").exists()


async def test_a_ref_the_repository_lacks_and_a_remote_that_fails_are_clear_errors(
    cache: RepoCache, origin: Origin, tmp_path: Path
) -> None:
    with pytest.raises(RepoError, match="has no branch, tag or commit 'nope'"):
        await cache.checkout(RepoSource(origin.url, "nope"), tmp_path / "ws", BRANCH)
    assert not (tmp_path / "ws").exists()
    with pytest.raises(GitError, match="git fetch failed"):
        await cache.mirror(RepoSource(str(tmp_path / "missing.git")))
    assert [p.name for p in cache.root.iterdir() if not p.name.endswith(".lock")] == [
        cache.path(RepoSource(origin.url)).name
    ]


async def test_a_bad_branch_name_is_refused(cache: RepoCache, source: RepoSource, tmp_path: Path) -> None:
    for bad in ("-b", "HEAD", "a..b", "x y"):
        with pytest.raises(RepoError):
            await cache.checkout(source, tmp_path / "ws", bad)


def test_task_branch_is_a2a_and_eight_hex_digits() -> None:
    assert task_branch("0123ABCD-ef45-6789-abcd-ef0123456789") == "a2a/0123abcd"
    made = task_branch("my context/../x")
    assert made.startswith("a2a/") and len(made) == 12 and made == task_branch("my context/../x")


async def test_two_turns_of_a_context_making_its_checkout_at_once_get_the_same_one(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    a, b = await asyncio.gather(cache.checkout(source, ws, BRANCH), cache.checkout(source, ws, BRANCH))
    assert (a.path, a.base) == (b.path, b.base) and [a.created, b.created].count(True) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ws.")] == []
