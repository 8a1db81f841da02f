"""`RepoPolicy`: what repository and files a message may bring, as the edge and the run check them."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import ip_network

import pytest

from app.agents.repos.errors import RepoError
from app.agents.repos.policy import RepoPolicy
from app.agents.repos.source import RepoSource
from app.ssrf import Policy

ALLOW = ("/srv/git", "https://git.example.com/team/")
POLICY = RepoPolicy(allow=ALLOW, max_attachment_bytes=10, max_attachments_bytes=15)


@dataclass
class FakePart:
    raw: bytes | None = None
    filename: str | None = None
    url: str | None = None


def repo(url: str, ref: str | None = None) -> dict:
    return {"repository": {"url": url, **({"ref": ref} if ref else {})}}


def test_a_message_naming_no_repository_works_on_the_roles_default() -> None:
    assert POLICY.named({}) is None and POLICY.source(None) is None
    default = RepoSource("/srv/git/app.git", "main")
    with_default = RepoPolicy(allow=ALLOW, default=default)
    assert with_default.source({"other": 1}) == default
    assert with_default.source(repo("/srv/git/lib.git")) == RepoSource("/srv/git/lib.git")


def test_an_allowed_source_is_taken_in_its_normal_form() -> None:
    assert POLICY.named(repo("https://GIT.example.com/team/app/", "v1")) == RepoSource(
        "https://git.example.com/team/app", "v1"
    )
    assert POLICY.named({"repository": "file:///srv/git/app.git"}) == RepoSource("/srv/git/app.git")


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        (repo("/srv/other/app.git"), "REPO_ALLOW"),
        (repo("https://git.example.com/team-b/app"), "REPO_ALLOW"),
        (repo("https://user:secret@git.example.com/team/app"), "credentials"),
        (repo("ext::sh%20-c%20touch"), "not a URL"),
        (repo("/srv/git/app.git", "--upload-pack=x"), "not a branch"),
        ({"repository": {"url": "/srv/git/app.git", "branch": "x"}}, "takes url and ref"),
        ({"repository": 7}, "must be"),
    ],
)
def test_a_refused_or_malformed_source_is_a_repo_error_saying_why(metadata: dict, says: str) -> None:
    with pytest.raises(RepoError, match=says):
        POLICY.named(metadata)


def test_no_allow_list_takes_nothing_and_says_so() -> None:
    nothing = RepoPolicy()
    assert not nothing.takes_repositories
    with pytest.raises(RepoError, match="REPO_ALLOW lists no URL prefix"):
        nothing.named(repo("/srv/git/app.git"))
    assert nothing.named({}) is None


def test_one_folder_for_everyone_takes_no_repository() -> None:
    fixed = RepoPolicy(allow=ALLOW, fixed="/srv/work")
    assert not fixed.takes_repositories and POLICY.takes_repositories
    with pytest.raises(RepoError, match="AGENT_REPO_PATH"):
        fixed.named(repo("/srv/git/app.git"))


def test_a_context_keeps_the_repository_of_its_first_message() -> None:
    first = repo("/srv/git/app.git", "main")
    POLICY.same_repository(first, repo("/srv/git/app.git", "dev"))  # its ref is not checked out again
    POLICY.same_repository(first, {})  # naming none keeps the context's
    with pytest.raises(RepoError, match="keeps the repository of its first message"):
        POLICY.same_repository(first, repo("/srv/git/lib.git"))
    with pytest.raises(RepoError, match=r"works on no repository, not /srv/git/app\.git"):
        POLICY.same_repository({}, repo("/srv/git/app.git"))
    defaulted = RepoPolicy(allow=ALLOW, default=RepoSource("/srv/git/app.git"))
    defaulted.same_repository({}, repo("/srv/git/app.git"))
    with pytest.raises(RepoError, match="REPO_ALLOW"):
        POLICY.same_repository(first, repo("/srv/elsewhere/app.git"))


def test_the_inline_files_are_named_and_checked_before_any_is_written() -> None:
    parts = [FakePart(raw=b"abc", filename="docs/a.txt"), FakePart(url="https://x/y"), FakePart(raw=b"12345")]
    assert POLICY.attachments(parts) == [("docs/a.txt", b"abc"), ("attachment-3", b"12345")]
    assert POLICY.linked(parts) == [("y", "https://x/y")], "named by its URL's last segment"
    for bad, says in [
        ([FakePart(raw=b"x", filename="../x")], "'..'"),
        ([FakePart(raw=b"x", filename="/etc/x")], "absolute"),
        ([FakePart(raw=b"x" * 11, filename="big")], "over the limit of 10"),
        ([FakePart(raw=b"x" * 8, filename="a"), FakePart(raw=b"x" * 8, filename="b")], "limit of 15 bytes"),
        ([FakePart(raw=b"x", filename="a/.git/config")], ".git"),
    ]:
        with pytest.raises(RepoError, match=says):
            POLICY.attachments(bad)


def test_a_file_by_url_is_checked_by_its_name_and_what_its_url_alone_shows() -> None:
    """At the edge, with no DNS: the scheme, credentials, an address literal the SSRF guard forbids, and the
    name (the part's, else the URL's last segment, percent-decoded) as an inline file's."""
    parts = [
        FakePart(url="http://files.example.com/a/b/spec%20v2.txt?sig=1"),
        FakePart(url="https://h.example/"),
    ]
    assert POLICY.linked(parts) == [
        ("spec v2.txt", "http://files.example.com/a/b/spec%20v2.txt?sig=1"),
        ("attachment-2", "https://h.example/"),
    ]
    named = FakePart(url="https://h.example/x", filename="in/put.txt")
    assert POLICY.linked([named]) == [("in/put.txt", "https://h.example/x")]
    for url, says in [
        ("ftp://h.example/x", "scheme must be https"),
        ("file:///etc/passwd", "scheme must be https"),
        ("https://user:pw@h.example/x", "credentials"),
        ("http://127.0.0.1/x", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[::ffff:10.0.0.1]/x", "private"),
        ("https://h.example/a%2F..%2F..%2Fx", "'..'"),
        ("https://h.example/.git", ".git"),
    ]:
        with pytest.raises(RepoError, match=says):
            POLICY.linked([FakePart(url=url)])
    with pytest.raises(RepoError, match="named twice"):
        POLICY.attachments([FakePart(raw=b"1", filename="y"), FakePart(url="https://x/y")])
    trusting = RepoPolicy(
        allow=ALLOW, urls=Policy(allow_http=True, allowed_cidrs=(ip_network("127.0.0.0/8"),))
    )
    assert trusting.linked([FakePart(url="http://127.0.0.1:8080/f")]) == [("f", "http://127.0.0.1:8080/f")]


def test_the_workspaces_and_the_cache_are_never_a_source() -> None:
    """REPO_ALLOW=/ would otherwise let a principal clone another's checkout by naming its path."""
    wide = RepoPolicy(allow=("/",), private=("/srv/ws", "/srv/repos"))
    assert wide.named(repo("/srv/git/app.git")) == RepoSource("/srv/git/app.git")
    for inside in ("/srv/ws/3f2a/ctx-1", "/srv/ws", "file:///srv/repos/0123abcd.git", "/srv/ws/../ws/x"):
        with pytest.raises(RepoError, match="never a source"):
            wide.named(repo(inside))
    assert wide.named(repo("/srv/wsx/app.git")) == RepoSource("/srv/wsx/app.git")


def test_push_is_asked_in_the_metadata_and_taken_only_where_the_role_pushes() -> None:
    pushing = RepoPolicy(allow=ALLOW, push=True)
    asked = {"repository": {"url": "/srv/git/app.git", "push": True}}
    assert pushing.push_asked(asked) is True
    assert pushing.named(asked) == RepoSource("/srv/git/app.git"), "push is not part of the source"
    alone = {"repository": {"push": True}}
    assert pushing.push_asked(alone) is True and pushing.named(alone) is None, "the context's repository"
    assert pushing.push_asked(repo("/srv/git/app.git")) is False and pushing.push_asked(None) is False
    assert POLICY.push_asked({"repository": {"url": "/srv/git/app.git", "push": False}}) is False
    with pytest.raises(RepoError, match="does not push task branches: its role's push in AGENTS"):
        POLICY.push_asked(asked)
    with pytest.raises(RepoError, match="push must be true or false"):
        pushing.push_asked({"repository": {"push": "yes"}})
    with pytest.raises(RepoError, match="AGENT_REPO_PATH"):
        RepoPolicy(allow=ALLOW, fixed="/srv/work", push=True).push_asked(alone)
    with pytest.raises(RepoError, match="url must be a repository URL"):
        pushing.named({"repository": {"push": True, "ref": "main"}})
