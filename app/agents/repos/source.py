"""`RepoSource`: the repository a task names (`metadata.repository`), checked before git ever sees it, and
`allowed`: whether the operator's REPO_ALLOW lets the server fetch it.

A source comes from a client, and git reads a value starting with `-` as an option, fetches with the
credentials written in a URL, runs commands for `ext::` URLs and resolves `..` in a URL's path on the
server's side. So a source is one of a few plain forms, refused otherwise:

- a repository on the server's disk: an absolute path or a `file://` URL, kept as its real path (links and
  `..` resolved), so that a local root in REPO_ALLOW holds it only if the repository really is inside;
- `https://`, `http://`, `git://` or `ssh://` URLs, and ssh's `user@host:path`: no password or token in
  them (a user name only with ssh), no `.` or `..` in the path, no query or fragment; the scheme and host in
  lower case and no trailing slash, so one repository has one spelling (and one mirror).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .errors import RepoError

SETTING = "REPO_ALLOW"
URL_SCHEMES = ("https", "http", "git", "ssh")
KEYS = ("url", "ref", "push")
"""What `metadata.repository` may hold: `push` is the policy's (`RepoPolicy.push_asked`), not the source's."""
MAX_URL = 2048
MAX_REF = 255
_CONTROL = re.compile(r"[\x00-\x20\x7f\\]")
_SCP = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9._~-]*)@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<path>[^:].*)"
)
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._~-]*")
_REF_PART = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_+@.-]*")
_AUTHORITY = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<user>[^/@]*@)?(?P<host>[^/:]*)(?P<rest>.*)", re.S
)


@dataclass(frozen=True)
class RepoSource:
    """A repository and the reference to check out; made only of checked values (`__post_init__`)."""

    url: str
    """Normalised: the real path of a repository on the server's disk, else the URL (module docstring)."""
    ref: str | None = None
    """A branch, tag or commit; None: the remote's default branch."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", normal_url(self.url))
        ref = (self.ref or "").strip()
        object.__setattr__(self, "ref", check_ref(ref) if ref else None)

    @classmethod
    def parse(cls, value: object) -> RepoSource:
        """From a task's `metadata.repository`: `{"url": ..., "ref": ...}` (ref optional) or the URL alone;
        RepoError naming what is wrong. A `push` key is left to the policy."""
        if isinstance(value, str):
            value = {"url": value}
        if not isinstance(value, Mapping):
            raise RepoError('metadata.repository must be {"url": ..., "ref": ...} or a URL')
        unknown = sorted(str(k) for k in value if k not in KEYS)
        if unknown:
            raise RepoError(
                f"metadata.repository takes url and ref, not {', '.join(unknown)} (and push: true to push)"
            )
        url, ref = value.get("url"), value.get("ref")
        if not isinstance(url, str) or not url.strip():
            raise RepoError("metadata.repository.url must be a repository URL or path")
        if ref is not None and not isinstance(ref, str):
            raise RepoError("metadata.repository.ref must be a branch, tag or commit name")
        return cls(url, ref)

    @property
    def local(self) -> bool:
        """On the server's disk."""
        return self.url.startswith("/")

    @property
    def key(self) -> str:
        """The name of its mirror in the cache: one per normalised URL."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]


def normal_url(text: str) -> str:
    """The normal form of a repository URL or path (module docstring); RepoError when it is refused."""
    url = text.strip()
    if not url:
        raise RepoError("the repository URL is empty")
    if len(url) > MAX_URL:
        raise RepoError(f"the repository URL is longer than {MAX_URL} characters")
    if url.startswith("-"):
        raise RepoError(f"the repository URL {url!r} starts with '-'")
    if _CONTROL.search(url):
        raise RepoError(f"the repository URL {url!r} has a space, a control character or a backslash")
    if url.startswith("/"):
        return os.path.realpath(url)
    if "://" not in url:
        return _scp(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise RepoError(f"the file URL {url!r} must be file:///absolute/path")
        return os.path.realpath(unquote(parts.path))
    if scheme not in URL_SCHEMES:
        raise RepoError(f"the repository URL {url!r} is not https, http, git, ssh, file or a path")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise RepoError(f"the repository URL {url!r} has a query or a fragment")
    if parts.password is not None or (parts.username is not None and scheme != "ssh"):
        raise RepoError(f"the repository URL {_hide(url)!r} has credentials in it; the server holds them")
    try:
        port = parts.port
    except ValueError:
        raise RepoError(f"the repository URL {url!r} has a bad port") from None
    hostport = parts.netloc.rpartition("@")[2]
    host = hostport.removesuffix(f":{port}") if port is not None else hostport
    if not _HOST.fullmatch(host):
        raise RepoError(f"the repository URL {url!r} has no valid host")
    user = parts.username
    if user is not None and not _USER.fullmatch(user):
        raise RepoError(f"the repository URL {url!r} has a bad user name")
    return f"{scheme}://{user + '@' if user else ''}{hostport.lower()}{_path(url, parts.path)}"


def _scp(url: str) -> str:
    """`user@host:path` (ssh's short form), host in lower case."""
    m = _SCP.fullmatch(url)
    if m is None:
        raise RepoError(
            f"the repository {url!r} is not a URL (https, http, git, ssh, file), ssh's user@host:path "
            "or an absolute path"
        )
    user = f"{m['user']}@" if m["user"] else ""
    return f"{user}{m['host'].lower()}:{_path(url, m['path'])}"


def _path(url: str, path: str) -> str:
    """A URL's path without trailing slashes; RepoError when it is empty or has `.` or `..` in it."""
    path = path.rstrip("/")
    if not path.strip("/"):
        raise RepoError(f"the repository URL {url!r} names no repository")
    if any(part in (".", "..") for part in unquote(path).split("/")):
        raise RepoError(f"the repository URL {url!r} has '.' or '..' in its path")
    return path


def _hide(url: str) -> str:
    """A URL with what its user part holds hidden, for a message."""
    parts = urlsplit(url)
    return url.replace(parts.netloc, "***@" + parts.netloc.rpartition("@")[2], 1)


def check_ref(ref: str) -> str:
    """A branch, tag or commit name as `git check-ref-format --allow-onelevel` takes it, narrowed to plain
    characters; never starting with `-` (an option) and without `..`, `@{`, `~`, `^` or `:` (revision
    syntax). RepoError otherwise."""
    parts = ref.split("/")
    good = (
        len(ref) <= MAX_REF
        and all(_REF_PART.fullmatch(p) and not p.endswith((".", ".lock")) for p in parts)
        and ".." not in ref
    )
    if not good:
        raise RepoError(f"the reference {ref!r} is not a branch, tag or commit name")
    return ref


def parse_allow(text: str | Sequence[str]) -> tuple[str, ...]:
    """REPO_ALLOW's entries (comma-separated, or a list): each a local folder (an absolute path or a
    `file://` URL) or a URL prefix; ValueError naming a bad entry, for a check at start-up."""
    entries = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        if entry.startswith("-") or _CONTROL.search(entry):
            raise ValueError(f"{SETTING} entry {entry!r} starts with '-' or has a space or control character")
        scp = "://" not in entry and _SCP.fullmatch(entry)
        if not (entry.startswith(("/", "file://")) or _scheme(entry) in URL_SCHEMES or scp):
            raise ValueError(
                f"{SETTING} entry {entry!r} is neither an absolute folder nor a URL prefix "
                "(https, http, git, ssh, file, user@host:)"
            )
        out.append(entry)
    return tuple(out)


def allowed(source: RepoSource, allow: Sequence[str], host: str = "server") -> str | None:
    """None when REPO_ALLOW (`allow`, its entries) holds the source, else why not, naming the setting and
    whose it is (`host`: the server's, or a remote worker's, which checks again before its disk). A
    URL prefix holds the URLs that start with it at a `/` or `:` (`https://host/team` holds
    `https://host/team/x`, not `https://host/team-b/x`); a local folder holds the repositories whose real
    path is inside its real path. No entry: nothing is allowed."""
    entries = [e.strip() for e in allow if e.strip()]
    if not entries:
        return f"this {host} takes no repository: {SETTING} lists no URL prefix or local folder"
    for entry in entries:
        root = _local_root(entry)
        if root is not None:
            if source.local and (source.url == root or source.url.startswith(root.rstrip("/") + "/")):
                return None
        elif not source.local and _under(source.url, _lower_host(entry)):
            return None
    return (
        f"the repository {source.url} is not allowed here: it is under none of the URL prefixes and local "
        f"folders of the {host}'s {SETTING}"
    )


def _scheme(entry: str) -> str:
    return entry.split("://", 1)[0].lower() if "://" in entry else ""


def _local_root(entry: str) -> str | None:
    """The real path of a local entry, None for a URL prefix."""
    if entry.startswith("/"):
        return os.path.realpath(entry)
    if _scheme(entry) == "file":
        parts = urlsplit(entry)
        return os.path.realpath(unquote(parts.path) or "/")
    return None


def _lower_host(entry: str) -> str:
    """A URL prefix with its scheme and host in lower case, as the sources are."""
    m = _AUTHORITY.fullmatch(entry)
    assert m is not None  # every group may be empty
    return f"{(m['scheme'] or '').lower()}{m['user'] or ''}{m['host'].lower()}{m['rest']}"


def _under(url: str, prefix: str) -> bool:
    if url == prefix.rstrip("/"):
        return True
    if prefix.endswith(("/", ":")):
        return url.startswith(prefix)
    return url.startswith(prefix + "/")
