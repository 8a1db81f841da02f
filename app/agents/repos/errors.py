"""`RepoError`: a repository, reference, workspace or attachment the server refuses or cannot prepare."""

from __future__ import annotations


class RepoError(ValueError):
    """What the client is told, one line: a malformed or refused source, a foreign workspace, a bad
    attachment, a reference the repository does not have."""


class GitError(RepoError):
    """A git command that failed or timed out; the message ends with the tail of its stderr."""
