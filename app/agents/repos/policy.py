"""`RepoPolicy`: what repository and files a message to a coding agent may bring, checked twice: by the edge
before the task is stored (a RepoError there is the client's -32602) and by the run before it touches the
disk (REPO_ALLOW may have changed in between, or the run happens on another replica).

A message names its repository in `metadata.repository` (`{"url", "ref"}`, or the URL alone); naming none,
it works on the role's default, if any. A context keeps the repository of its first message: a later
message naming another is refused (`same_repository`). A message may ask its task's branch pushed to the
remote (`metadata.repository.push: true`, with or without a url: without one, the context's repository);
only a role with `push` allowed takes it (`push_asked`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.ssrf import Policy as UrlPolicy

from .attachments import check_attachments
from .errors import RepoError
from .fetch import check_url, url_name
from .source import SETTING, RepoSource, allowed

METADATA_KEY = "repository"
"""The key of a message's metadata that names its repository."""
PUBLIC = UrlPolicy(allow_http=True)
"""Files by URL from public addresses only, over http or https (no ATTACHMENT_URL_ALLOWED_*)."""
PUSH_KEY = "push"
"""The key of `metadata.repository` that asks the task's branch pushed."""
UNNAMED = "attachment-{n}"
"""The name of the n-th file part (from 1) that has none."""


class FilePart(Protocol):
    """What a file part of a message offers here (`protocol.model.Part`, not imported)."""

    raw: bytes | None
    url: str | None
    filename: str | None


@dataclass(frozen=True)
class RepoPolicy:
    allow: tuple[str, ...] = ()
    """REPO_ALLOW's entries (`source.parse_allow`); none: no repository is taken."""
    default: RepoSource | None = None
    """The role's repository, for a message that names none."""
    fixed: str | None = None
    """AGENT_REPO_PATH: every run works in that one folder, so no repository is checked out."""
    max_attachment_bytes: int = 5 * 1024 * 1024
    max_attachments_bytes: int = 8 * 1024 * 1024
    urls: UrlPolicy = PUBLIC
    """Which files by URL may be fetched (the webhooks' SSRF guard, with ATTACHMENT_URL_ALLOWED_*)."""
    url_timeout_s: float = 30.0
    """Longest the fetch of one file by URL may take (ATTACHMENT_URL_TIMEOUT_S)."""
    push: bool = False
    """A task may ask its branch pushed (the role's `push`, REPO_PUSH)."""
    private: tuple[str, ...] = ()
    """Folders no source may be in, whatever REPO_ALLOW says: the workspaces (every principal's checkouts)
    and the cache, so that no one fetches another's work by naming its path."""
    host: str = "server"
    """Whose settings these are, as a refusal names them: the server's, or a remote worker's (`worker`)."""

    @property
    def takes_repositories(self) -> bool:
        """A message may name a repository here (what the card's extension advertises)."""
        return bool(self.allow) and not self.fixed

    def named(self, metadata: Mapping[str, Any] | None) -> RepoSource | None:
        """The repository a message's metadata names, checked; None when it names none. RepoError when it
        is malformed or refused (the message names REPO_ALLOW)."""
        value = (metadata or {}).get(METADATA_KEY)
        if value is None or (isinstance(value, Mapping) and set(value) == {PUSH_KEY}):
            return None
        source = RepoSource.parse(value)
        if self.fixed:
            raise RepoError(
                f"this {self.host} works in one folder for every task (AGENT_REPO_PATH), so it checks out no "
                f"repository; {SETTING} applies only without AGENT_REPO_PATH"
            )
        why = allowed(source, self.allow, self.host)
        if why is not None:
            raise RepoError(why)
        if source.local and any(_inside(source.url, root) for root in self.private):
            raise RepoError(
                f"the repository {source.url} is in the {self.host}'s workspaces or repository cache, which "
                "are never a source, whatever REPO_ALLOW says"
            )
        return source

    def push_asked(self, metadata: Mapping[str, Any] | None) -> bool:
        """Whether a message asks its task's branch pushed (`metadata.repository.push`); RepoError when the
        value is not a boolean, or it asks and this role may not push."""
        value = (metadata or {}).get(METADATA_KEY)
        if not isinstance(value, Mapping) or PUSH_KEY not in value:
            return False
        asked = value[PUSH_KEY]
        if not isinstance(asked, bool):
            raise RepoError("metadata.repository.push must be true or false")
        if asked and self.fixed:
            raise RepoError(
                "this server works in one folder for every task (AGENT_REPO_PATH): it has no task branch "
                "to push"
            )
        if asked and not self.push:
            raise RepoError(
                "this agent does not push task branches: its role's push in AGENTS (or REPO_PUSH) is off"
            )
        return asked

    def source(self, metadata: Mapping[str, Any] | None) -> RepoSource | None:
        """The repository a message works on: the one it names (`named`), else the role's default."""
        return self.named(metadata) or self.default

    def same_repository(self, first: Mapping[str, Any] | None, later: Mapping[str, Any] | None) -> None:
        """RepoError unless a later message of a context (`later`, its metadata) that names a repository
        names the one of the context's first message (`first`: the one it named, else the role's default).
        A later message naming none keeps the context's; the ref of a later message is not checked out
        again (the context's branch goes on)."""
        now = self.named(later)
        if now is None:
            return
        value = (first or {}).get(METADATA_KEY)
        try:
            had = RepoSource.parse(value) if value is not None else self.default
        except RepoError:
            had = None
        if had is None or had.url != now.url:
            was = had.url if had is not None else "no repository"
            raise RepoError(
                f"this context works on {was}, not {now.url}: a context keeps the repository of its first "
                "message; start a new context (no contextId) for another"
            )

    def attachments(self, parts: Sequence[FilePart]) -> list[tuple[str, bytes]]:
        """The inline files of a message's parts (name, bytes), checked with its files by URL (names,
        sizes, what the URLs alone show); RepoError naming the first refused. A part without a name is
        `attachment-<n>`, or for a URL its path's last segment."""
        return self._files(parts)[0]

    def linked(self, parts: Sequence[FilePart]) -> list[tuple[str, str]]:
        """The files by URL of a message's parts (name, url), checked as `attachments` checks them; the
        run fetches them (`fetch.fetch_files`)."""
        return self._files(parts)[1]

    def _files(self, parts: Sequence[FilePart]) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
        inline: list[tuple[str, bytes]] = []
        linked: list[tuple[str, str]] = []
        for part in parts:
            raw, url = getattr(part, "raw", None), getattr(part, "url", None)
            unnamed = UNNAMED.format(n=len(inline) + len(linked) + 1)
            if raw is not None:
                inline.append((part.filename or unnamed, bytes(raw)))
            elif url is not None:
                linked.append((part.filename or url_name(url) or unnamed, url))
        named = [*inline, *((name, b"") for name, _ in linked)]
        check_attachments(named, self.max_attachment_bytes, self.max_attachments_bytes)
        for name, url in linked:
            check_url(name, url, self.urls)
        return inline, linked


def _inside(path: str, root: str) -> bool:
    """`path` (a real path) is `root` or below it (`root` resolved here)."""
    real = os.path.realpath(root)
    return path == real or path.startswith(real.rstrip("/") + "/")
