"""`push`: a task's branch to its repository's remote, from the server's mirror.

Never from the checkout: its config is the agent's, and git there would send a credential wherever that
config says (`http.proxy`, `url.<x>.insteadOf`, a credential helper). The mirror fetches the commit from
the checkout (git's `upload-pack` serves a repository it does not trust without running anything of it)
and pushes it. The token reaches only that push: as an `http.extraHeader` in the environment of the
server's git (GIT_CONFIG_COUNT, so not in the process list either), never in a file, a URL or the
environment of anything else; redirects are not followed with it. An ssh key (`Credentials.ssh_key_file`)
reaches only that push's ssh (`-i`, `IdentitiesOnly`). A failure's message never shows the token.

The credentials are the role's (`credentials.Credentials`); the same let the mirror fetch a private
remote (`credentials.fetch_auth`).
"""

from __future__ import annotations

import base64
import secrets

from .cache import SHA, Checkout, RepoCache
from .credentials import TOKEN_USER, ssh_command
from .errors import GitError, RepoError
from .git import TIMEOUT_S, run


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
        env["GIT_SSH_COMMAND"] = ssh_command(ssh_key_file)
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
