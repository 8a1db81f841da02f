"""`Credentials`: what the server's own git authenticates with to a private remote, from files the operator
names (a role's `push_token_file`, `push_ssh_key_file`), read at each use (a rotated token is used at once)
and never shown to an agent's jail.

A push sends the token at once (`push.py`); a fetch into a mirror (`cache.py`) only when the remote asks for
it (HTTP 401) and only to the source's own scheme and host: a credential helper scoped to that URL answers
from the git process's environment, so the token goes to no public remote, no host a redirect names, and is
never written to the mirror's config or a URL.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .errors import RepoError

TOKEN_USER = "x-access-token"
"""The user name sent with a token (GitHub's; GitLab and Gitea take any name with a token)."""
MAX_TOKEN_BYTES = 16 * 1024


@dataclass(frozen=True)
class Credentials:
    """What the server's own git pushes with: files, named by the operator, that no agent sees."""

    token_file: str | None = None
    """Holds a token sent as HTTP Basic (`username`:token) with the push over http(s)."""
    username: str = TOKEN_USER
    ssh_key_file: str | None = None
    """A private key ssh offers alone (`-i`, `IdentitiesOnly=yes`) for a push over ssh."""

    def token(self) -> str | None:
        """The token, read now (so a rotated one is used at once); RepoError naming the file, never
        showing what it holds, when it cannot be read or is empty."""
        if not self.token_file:
            return None
        return read_token(self.token_file)


def read_token(path: str) -> str:
    """The token a file holds (its first line, stripped); RepoError when it is missing, unreadable, too
    long or empty. The message names the file only."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise RepoError(f"the push token file {path} cannot be read: {exc.strerror}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise RepoError(f"the push token file {path} is longer than {MAX_TOKEN_BYTES} bytes")
    lines = raw.decode("utf-8", "replace").strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token or any(ord(c) < 0x21 or ord(c) == 0x7F for c in token):
        raise RepoError(f"the push token file {path} holds no token (one line, no spaces)")
    return token


def check_key_file(path: str) -> None:
    """RepoError unless `path` is a regular file the server can read (an ssh private key)."""
    p = Path(path)
    if not p.is_absolute():
        raise RepoError(f"the push ssh key file {path} must be an absolute path")
    try:
        with p.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise RepoError(f"the push ssh key file {path} cannot be read: {exc.strerror}") from None


HELPER = (
    '!f() { test "$1" = get && '
    'printf \'username=%s\\npassword=%s\\n\' "$A2A_GIT_USERNAME" "$A2A_GIT_TOKEN"; }; f'
)
"""A credential helper answering from its environment, so the token is in no file and no argument."""


def fetch_auth(credentials: Credentials | None, url: str) -> tuple[dict[str, str], dict[str, str]]:
    """Command-line config and environment for the server's fetch of `url` with `credentials`: the token
    for an http(s) source, offered by a helper scoped to its scheme and host; the ssh key for any other.
    ({}, {}) without credentials."""
    if credentials is None:
        return {}, {}
    scheme = url.split("://", 1)[0].lower() if "://" in url else "ssh"
    if scheme in ("http", "https"):
        token = credentials.token()
        if token is None:
            return {}, {}
        host = urlsplit(url).netloc.rpartition("@")[2]
        config = {f"credential.{scheme}://{host}.helper": HELPER}
        return config, {"A2A_GIT_USERNAME": credentials.username, "A2A_GIT_TOKEN": token}
    if scheme == "ssh" and credentials.ssh_key_file:
        return {}, {"GIT_SSH_COMMAND": ssh_command(credentials.ssh_key_file)}
    return {}, {}


def ssh_command(key_file: str) -> str:
    """ssh offering the one key, never asking."""
    return f"ssh -o BatchMode=yes -o IdentitiesOnly=yes -i {shlex.quote(key_file)}"
