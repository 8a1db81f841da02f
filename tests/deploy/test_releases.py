"""RELEASES: its format, its commits in this clone, and which release the upgrade check runs."""

from __future__ import annotations

import subprocess

import pytest

from scripts.releases import ROOT, Release, ReleaseError, parse, previous, read, same_code, tree


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_releases_file_parses_and_names_commits_of_this_clone():
    releases = read()
    assert releases, "RELEASES names no release"
    for release in releases:
        assert tree(release.commit), release  # ReleaseError if the commit is not here


def test_parse_rules():
    text = "# comment\n\n" + "a" * 40 + " 2026-11-26  # the first\n" + "b" * 40 + " second one\n"
    assert parse(text) == [Release("a" * 40, "2026-11-26"), Release("b" * 40, "second one")]
    twice = "a" * 40 + " x\n" + "a" * 40 + " y"
    for bad in ["73b6970 short-hash", "A" * 40 + " upper-case", "a" * 40, twice]:
        with pytest.raises(ValueError):
            parse(bad)


def test_previous_is_the_newest_release_that_is_not_head():
    last = read()[-1]
    head = Release(_head(), "cut from HEAD")
    assert previous([last, head]) == last
    if not same_code(last.commit):
        assert previous([last]) == last
    with pytest.raises(ReleaseError, match="no release before this code"):
        previous([head])


def _git(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_right_after_a_release_is_cut_the_one_before_is_checked():
    # The commit that cuts HEAD as a release (its RELEASES line, nothing else), made as loose objects only.
    head = _head()
    blob = _git("hash-object", "-w", "--stdin", stdin=(ROOT / "RELEASES").read_text() + f"{head} cut\n")
    listing = _git("ls-tree", "HEAD").splitlines()
    rows = [row for row in listing if not row.endswith("\tRELEASES")] + [f"100644 blob {blob}\tRELEASES"]
    cut = _git("commit-tree", _git("mktree", stdin="\n".join(rows) + "\n"), "-p", head, "-m", "cut")
    assert tree(cut) != tree(head) and same_code(head, cut)
    last = read()[-1]
    if not same_code(last.commit, cut):
        assert previous([last, Release(head, "cut")], head=cut) == last


def test_a_commit_missing_from_the_clone_is_named():
    missing = Release("0123456789abcdef0123456789abcdef01234567", "gone")
    with pytest.raises(ReleaseError, match="is not in this clone"):
        previous([missing])
