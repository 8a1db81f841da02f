"""push on real git: the task's branch reaches the remote from the server's mirror, over file:// and over
smart HTTP (`git http-backend` behind a small local server that wants a token to push), and the token goes
nowhere but that push's request headers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agents.repos.cache import RepoCache
from app.agents.repos.changes import collect
from app.agents.repos.credentials import Credentials, fetch_auth
from app.agents.repos.errors import GitError, RepoError
from app.agents.repos.git import PASSED
from app.agents.repos.push import push
from app.agents.repos.source import RepoSource
from tests.support.git_http import git_http

from .conftest import Origin, git

BRANCH = "a2a/0123abcd"
TOKEN = "tok-8c1f3a9e55d2"


def every_file_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield from (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


async def test_the_branch_is_pushed_from_the_mirror_to_a_file_remote(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "notes", 1 << 20)
    assert await push(cache, co, changes.head, token=TOKEN) == f"refs/heads/{BRANCH}"
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == changes.head
    mirror = cache.path(source)
    assert "refs/a2a/" not in git("--git-dir", str(mirror), "for-each-ref"), (
        "the mirror keeps no ref of a task"
    )
    leaks = [
        p for p in every_file_under(co.path, cache.root, origin.bare) if TOKEN.encode() in p.read_bytes()
    ]
    assert leaks == []

    (co.path / "more.md").write_text("more\n")
    later = await collect(co, changes.head, "more", 1 << 20)
    await push(cache, co, later.head)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == later.head


async def test_a_push_is_never_forced_nor_of_another_commit(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "a.md").write_text("a\n")
    changes = await collect(co, None, "a", 1 << 20)
    with pytest.raises(RepoError, match="not pushed"):
        await push(cache, co, co.base)
    with pytest.raises(RepoError, match="not a full commit id"):
        await push(cache, co, "HEAD")
    origin.add_commit("theirs.md", "someone else's branch\n", branch="main")
    git("push", "--quiet", "origin", f"main:refs/heads/{BRANCH}", cwd=origin.work)
    with pytest.raises(GitError, match="git push failed"):
        await push(cache, co, changes.head)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") != changes.head


@pytest.fixture
def http_remote(origin: Origin) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    with git_http(origin.bare.parent, TOKEN) as served:
        yield f"{served.url}/{origin.bare.name}", served.seen


async def test_a_push_over_http_sends_the_token_in_its_header_and_nowhere_else(
    cache: RepoCache, origin: Origin, tmp_path: Path, http_remote: tuple[str, list[tuple[str, str | None]]]
) -> None:
    url, seen = http_remote
    source = RepoSource(url)
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    assert git("remote", "get-url", "origin", cwd=co.path) == url
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "notes", 1 << 20)
    assert all(auth is None for _, auth in seen), "fetching needs no token and gets none"
    with pytest.raises(GitError, match="git push failed"):
        await push(cache, co, changes.head)  # no token: refused, and no prompt waits for one
    await push(cache, co, changes.head, token=TOKEN)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == changes.head
    with_token = [path for path, auth in seen if auth]
    assert f"/{origin.bare.name}/git-receive-pack" in with_token
    assert all("git-receive-pack" in path for path in with_token), "the token goes with the push only"
    leaks = [p for p in every_file_under(co.path, cache.root) if TOKEN.encode() in p.read_bytes()]
    assert leaks == []


FAKE_SSH = """#!/bin/sh
# An ssh stand-in (no sshd here): records its arguments, then runs the remote command locally.
printf '%s\\n' "$*" >> "$SSH_LOG"
for last; do :; done
exec sh -c "$last"
"""


async def test_an_ssh_key_reaches_only_the_push_and_a_remotes_echo_never_shows_the_token(
    cache: RepoCache, origin: Origin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    calls = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("SSH_LOG", str(calls))
    monkeypatch.setattr("app.agents.repos.git.PASSED", (*PASSED, "SSH_LOG"))  # for the stand-in alone
    key = tmp_path / "keys" / "id ed25519"
    key.parent.mkdir()
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n")
    source = RepoSource(f"ssh://git.example{origin.bare}")
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "notes", 1 << 20)
    await push(cache, co, changes.head, ssh_key_file=str(key))
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == changes.head
    lines = calls.read_text().splitlines()
    with_key = [line for line in lines if "-i" in line.split()]
    assert len(with_key) == 1 and "git-receive-pack" in with_key[0], lines
    assert f"-o IdentitiesOnly=yes -i {key}" in with_key[0] and "BatchMode=yes" in with_key[0]
    assert all("git-upload-pack" in line for line in lines if line not in with_key), "fetches get no key"

    # A remote whose message shows the token (as one echoing an http push's headers could): the failure's
    # message hides it.
    hook = origin.bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho 'refused, you sent {TOKEN}' >&2\nexit 1\n")
    hook.chmod(0o755)
    (co.path / "more.md").write_text("more\n")
    later = await collect(co, changes.head, "more", 1 << 20)
    with pytest.raises(GitError, match="git push failed") as failed:
        await push(cache, co, later.head, token=TOKEN, ssh_key_file=str(key))
    assert TOKEN not in str(failed.value) and "refused, you sent ***" in str(failed.value)


async def test_a_private_remote_is_fetched_with_the_token_only_when_it_asks_and_only_from_its_host(
    cache: RepoCache, origin: Origin, tmp_path: Path
) -> None:
    """The mirror of a remote that wants a token to fetch gets it from the role's credentials, answered by a
    helper only after the remote's 401, for that scheme and host alone; a public remote beside it gets no
    token, and neither the mirror nor the checkout keeps it."""
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    creds = Credentials(str(token_file))
    git("clone", "--quiet", "--bare", str(origin.bare), str(origin.bare.parent / "secret.git"))
    with git_http(origin.bare.parent, TOKEN, private=["secret.git"]) as served:
        secret = RepoSource(f"{served.url}/secret.git")
        with pytest.raises(GitError, match="git fetch failed") as refused:
            await cache.checkout(secret, tmp_path / "none", BRANCH)
        assert TOKEN not in str(refused.value)
        assert not cache.path(secret).exists() and not (tmp_path / "none").exists(), "nothing half made"
        wrong = tmp_path / "token2"
        wrong.write_text("tok-not-the-one\n")
        with pytest.raises(GitError, match="git fetch failed"):
            await cache.checkout(secret, tmp_path / "wrong", BRANCH, Credentials(str(wrong)))
        co = await cache.checkout(secret, tmp_path / "ws", BRANCH, creds)
        assert co.base == origin.main and (co.path / "src" / "app.py").is_file()
        await cache.mirror(secret, creds)  # fetched again, asked again
        public = await cache.checkout(
            RepoSource(f"{served.url}/{origin.bare.name}"), tmp_path / "pub", BRANCH, creds
        )
        assert public.base == origin.main
    assert served.tokens_sent_to(origin.bare.name) == [None] * len(served.tokens_sent_to(origin.bare.name))
    sent = served.tokens_sent_to("secret.git")
    assert sent[0] is None and any(sent), "asked first (401), then given"
    leaks = [p for p in every_file_under(tmp_path / "ws", cache.root) if TOKEN.encode() in p.read_bytes()]
    assert leaks == []


def test_fetch_credentials_are_scoped_to_the_sources_scheme_and_host(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    key = tmp_path / "id"
    key.write_text("key\n")
    creds = Credentials(str(token_file), "bot", str(key))
    config, env = fetch_auth(creds, "https://Git.Example.com:8443/org/repo.git")
    assert list(config) == ["credential.https://Git.Example.com:8443.helper"]
    assert env == {"A2A_GIT_USERNAME": "bot", "A2A_GIT_TOKEN": TOKEN}
    assert TOKEN not in next(iter(config.values()))
    config, env = fetch_auth(creds, "git@example.com:org/repo.git")
    assert config == {} and "-i" in env["GIT_SSH_COMMAND"] and str(key) in env["GIT_SSH_COMMAND"]
    assert fetch_auth(None, "https://example.com/r.git") == ({}, {})
    assert fetch_auth(Credentials(), "https://example.com/r.git") == ({}, {})
