"""RepoSource and REPO_ALLOW: what a task may name as its repository, and what the operator lets through."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app.agents.repos.errors import RepoError
from app.agents.repos.source import RepoSource, allowed, check_ref, parse_allow


def test_parse_takes_the_object_or_the_url_and_strips_whitespace(tmp_path: Path) -> None:
    assert RepoSource.parse(
        {"url": " https://Git.Example.com/Team/App.git/ ", "ref": " v1.2 "}
    ) == RepoSource("https://git.example.com/Team/App.git", "v1.2")
    assert RepoSource.parse({"url": "https://git.example.com/a/b"}).ref is None
    assert RepoSource.parse({"url": "https://git.example.com/a/b", "ref": "  "}).ref is None
    assert RepoSource.parse("git@GitHub.com:acme/app.git") == RepoSource("git@github.com:acme/app.git")
    assert RepoSource.parse({"url": "ssh://git@Host.example.com:2222/srv/app"}).url == (
        "ssh://git@host.example.com:2222/srv/app"
    )


def test_a_local_repository_is_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "repos" / "app").mkdir(parents=True)
    os.symlink(tmp_path / "repos" / "app", tmp_path / "link")
    real = str((tmp_path / "repos" / "app").resolve())
    for given in (f"{tmp_path}/repos/app/", f"file://{tmp_path}/repos/./x/../app", f"{tmp_path}/link"):
        source = RepoSource(given)
        assert source.url == real and source.local
    assert RepoSource(f"file://{tmp_path}/repos/a%20b").url.endswith("/repos/a b")
    assert RepoSource("https://h.example.com/a").key == RepoSource("https://H.example.com/a/").key


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"url": "https://user:secret@git.example.com/a/b"}, "credentials"),
        ({"url": "https://token@git.example.com/a/b"}, "credentials"),
        ({"url": "ssh://git:secret@git.example.com/a/b"}, "credentials"),
        ({"url": "-uhttps://git.example.com/a"}, "starts with '-'"),
        ({"url": "--upload-pack=touch /tmp/x"}, "starts with '-'"),
        ({"url": "x@-oProxyCommand=evil:a/b"}, "not a URL"),
        ({"url": "https://-oProxy.example.com/a"}, "no valid host"),
        ({"url": "ext::sh"}, "not a URL"),
        ({"url": "ftp://git.example.com/a"}, "not https"),
        ({"url": "https://git.example.com/team/../other/app"}, "'..'"),
        ({"url": "https://git.example.com/team/%2E%2E/other/app"}, "'..'"),
        ({"url": "git@host.example.com:team/../x"}, "'..'"),
        ({"url": "https://git.example.com/a?x=1"}, "query"),
        ({"url": "https://git.example.com"}, "names no repository"),
        ({"url": "relative/path"}, "not a URL"),
        ({"url": "file://server/srv/x"}, "file:///absolute/path"),
        ({"url": "https://git.example.com/a b"}, "space"),
        ({"url": ""}, "must be a repository URL"),
        ({"url": 3}, "must be a repository URL"),
        ({"url": "https://git.example.com/a", "ref": "-f"}, "not a branch, tag or commit name"),
        ({"url": "https://git.example.com/a", "ref": "main~1"}, "not a branch"),
        ({"url": "https://git.example.com/a", "ref": "a..b"}, "not a branch"),
        ({"url": "https://git.example.com/a", "ref": 7}, "ref must be"),
        ({"url": "https://git.example.com/a", "branch": "x"}, "takes url and ref, not branch"),
        (["https://git.example.com/a"], 'must be {"url"'),
    ],
)
def test_malformed_or_dangerous_input_is_a_clear_repo_error(value: object, why: str) -> None:
    with pytest.raises(RepoError, match=re.escape(why)) as refused:
        RepoSource.parse(value)
    assert "secret" not in str(refused.value), "a credential is never echoed"
    assert isinstance(refused.value, ValueError)


def test_check_ref_takes_branches_tags_and_commits() -> None:
    for ref in ("main", "feature/x-1", "v1.2.3", "release_2024", "0123abcd", "refs/heads/main", "HEAD"):
        assert check_ref(ref) == ref
    for ref in ("-x", "a.lock", ".hidden", "a//b", "a/", "@{u}", "x^", "a:b", "a\\b", "a" * 256):
        with pytest.raises(RepoError):
            check_ref(ref)


def test_a_url_prefix_holds_the_urls_under_it_at_a_boundary() -> None:
    team = RepoSource("https://git.example.com/team/app.git")
    for allow in (
        ["https://git.example.com/team"],
        ["https://GIT.example.com/team/"],
        ["https://git.example.com"],
        ["/srv/repos", " ", "https://git.example.com/team/app.git"],
    ):
        assert allowed(team, allow) is None, allow
    for allow in (
        ["https://git.example.com/tea"],
        ["https://git.example.com.evil.test"],
        ["http://git.example.com"],
    ):
        refused = allowed(team, allow)
        assert refused is not None and "REPO_ALLOW" in refused and team.url in refused, allow
    assert allowed(RepoSource("git@host.example.com:team/app"), ["git@host.example.com:team/"]) is None
    assert allowed(RepoSource("git@host.example.com:team-b/app"), ["git@host.example.com:team"]) is not None


def test_an_empty_allow_list_allows_nothing() -> None:
    for allow in ([], ["", "  "]):
        refused = allowed(RepoSource("https://git.example.com/a"), allow)
        assert refused is not None and "REPO_ALLOW" in refused


def test_a_local_root_holds_only_what_really_is_inside_it(tmp_path: Path) -> None:
    root = tmp_path / "srv" / "repos"
    (root / "app").mkdir(parents=True)
    (tmp_path / "srv" / "etc").mkdir()
    (tmp_path / "srv" / "reposX").mkdir()
    os.symlink(tmp_path / "srv" / "etc", root / "escape")
    assert allowed(RepoSource(str(root / "app")), [str(root)]) is None
    assert allowed(RepoSource(f"file://{root}/app"), [f"file://{root}/"]) is None
    assert allowed(RepoSource(str(root)), [str(root)]) is None
    for outside in (f"{root}/../etc", f"{root}/escape", f"{root}/escape/x", f"{tmp_path}/srv/reposX"):
        refused = allowed(RepoSource(outside), [str(root)])
        assert refused is not None and "REPO_ALLOW" in refused, outside
    assert allowed(RepoSource(str(root / "app")), ["https://git.example.com"]) is not None
    assert allowed(RepoSource("https://git.example.com/a"), [str(root)]) is not None
    linked_root = tmp_path / "link-to-repos"
    os.symlink(root, linked_root)
    assert allowed(RepoSource(str(root / "app")), [str(linked_root)]) is None, "the root is resolved too"


def test_parse_allow_checks_each_entry() -> None:
    assert parse_allow(
        " https://git.example.com/team/, /srv/repos ,,file:///srv/b, git@h.example.com:t/"
    ) == (
        "https://git.example.com/team/",
        "/srv/repos",
        "file:///srv/b",
        "git@h.example.com:t/",
    )
    assert parse_allow(["/srv/a", ""]) == ("/srv/a",)
    for bad in ("srv/repos", "ftp://h/x", "-x", "/srv/a b"):
        with pytest.raises(ValueError, match="REPO_ALLOW entry"):
            parse_allow(bad)
