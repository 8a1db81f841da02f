"""`push`: a task's branch to its repository's remote, from the server's mirror.

Never from the checkout: its config is the agent's, and git there would send a credential wherever that
config says (`http.proxy`, `url.<x>.insteadOf`, a credential helper). The mirror fetches the commit from
the checkout (git's `upload-pack` serves a repository it does not trust without running anything of it)
and pushes it. The token reaches only that push: as an `http.extraHeader` in the environment of the
server's git (GIT_CONFIG_COUNT, so not in the process list either), never in a file, a URL or the
environment of anything else; redirects are not followed with it. An ssh key (`Credentials.ssh_key_file`)
reaches only that push's ssh (`-i`, `IdentitiesOnly`). A failure's message never shows the token.

`Credentials` are files the operator names (a role's `push_token_file`, `push_ssh_key_file`), read by the
server at each push (a rotated token is used at once) and never shown to an agent's jail.
"""

from __future__ import annotations

import base64
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from .cache import SHA, Checkout, RepoCache
from .errors import GitError, RepoError
from .git import TIMEOUT_S, run

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


async def push(
    cache: RepoCache,
    checkout: Checkout,
    head: str,
    *,
    token: str | None = None,
    username: str = TOKEN_USER,
    ssh_key_file: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> str:
    """Push commit `head` of `checkout` (what `changes.collect` measured) to the branch of the same name on
    the source's remote: its ref there. Not forced: a branch that moved on the remote (or a context id
    sharing its first 8 digits) is a GitError, never written over. RepoError when the checkout's HEAD is
    not `head` any more."""
    if not SHA.fullmatch(head):
        raise RepoError(f"{head!r} is not a full commit id")
    if not cache.path(checkout.source).exists():
        await cache.mirror(checkout.source)
    config = {"http.followRedirects": "false"}
    hidden: list[str] = []
    if token:
        basic = base64.b64encode(f"{username}:{token}".encode()).decode()
        config["http.extraHeader"] = f"Authorization: Basic {basic}"
        hidden = [token, basic]
    env = {}
    if ssh_key_file:
        key = shlex.quote(ssh_key_file)
        env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o IdentitiesOnly=yes -i {key}"
    target = f"refs/heads/{checkout.branch}"
    async with cache.locked(checkout.source) as mirror:
        here = f"--git-dir={mirror}"
        held = f"refs/a2a/push/{secrets.token_hex(8)}"
        fetch = [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            str(checkout.path),
            f"+HEAD:{held}",
        ]
        await run([here, *fetch], timeout_s=timeout_s)
        try:
            got = (await run([here, "rev-parse", "--verify", held], timeout_s=timeout_s)).text.strip()
            if got != head:
                raise RepoError(f"the checkout is at {got[:12]} now, not at {head[:12]}; not pushed")
            try:
                await run(
                    [here, "push", "--quiet", "origin", f"{held}:{target}"],
                    config=config,
                    env=env,
                    timeout_s=timeout_s,
                )
            except GitError as exc:
                raise GitError(_hide(str(exc), hidden)) from None
        finally:
            await run([here, "update-ref", "-d", held], timeout_s=timeout_s)
    return target


def _hide(text: str, secrets_: list[str]) -> str:
    """`text` without any of `secrets_` (a remote may echo what it was sent)."""
    for value in secrets_:
        text = text.replace(value, "***")
    return text
