"""Running `git`: an environment of our own, a time limit, and the overrides under which the server's git
touches a checkout the agent could write.

Every command gets no system or global config (an operator's `~/.gitconfig` must not change what a task
sees), no prompt (a missing credential fails instead of hanging), the transports a `RepoSource` may name and
none other (`ext::` runs commands), the server's identity for its own commits, and a time limit after which
its whole process group is killed.

A checkout is different: inside its jail the agent may write `.git/config` and `.git/hooks`, and git runs
what a repository's config names (hooks, `core.fsmonitor`, filter drivers, external diff and textconv
drivers, a lazy fetch over `core.sshCommand`). `Worktree` runs the server's commands on a checkout with the
repository named on the command line (never found from `.git` files or `core.worktree`), with command-line
config that wins over the checkout's and turns each of those off, with no transport at all, and through
the task's jail when it is given one (`launcher`), so that the server's commands there can do no more
than the agent could.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import GitError, RepoError

Launcher = Callable[[list[str], Mapping[str, str]], list[str]]
"""Turns a command and its environment into the command actually started: the task's jail around it
(`cli.process.CliProcess` takes the same)."""

TIMEOUT_S = 600.0
"""A command's default time limit: a clone of a large repository over a slow link, not a hung one."""
SERVER_NAME = "a2a-server"
SERVER_EMAIL = "a2a-server@localhost"
PROTOCOLS = "file:git:http:https:ssh"
"""The transports git may use (GIT_ALLOW_PROTOCOL): those a `RepoSource` accepts."""
PASSED = (
    "PATH",
    "HOME",
    "SSH_AUTH_SOCK",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "GIT_SSL_CAINFO",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
"""Of the server's environment, what git gets: where programs are, ssh's keys and agent, the proxies and
certificates an operator set for the network; nothing else (no GIT_DIR, no credentials)."""
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
STDERR_TAIL = 600

HARDENED: Mapping[str, str] = {
    "core.hooksPath": os.devnull,
    "core.fsmonitor": "false",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "log.showSignature": "false",
    "submodule.recurse": "false",
    "status.submoduleSummary": "false",
    "diff.submodule": "short",
    "diff.noprefix": "false",
    "diff.relative": "false",
    "color.ui": "false",
    "core.pager": "cat",
    "credential.helper": "",
    "gc.auto": "0",
    "maintenance.auto": "false",
}
"""Command-line config for every command on a checkout (it wins over the checkout's own): no hooks, no
fsmonitor, no signing or signature checks (gpg.program), no command in a submodule, no automatic gc, and
diffs in the form `git apply` reads. External diff and textconv drivers are turned off by the diff
commands' own flags (`DIFF_FLAGS`), filter drivers by `Worktree` one by one."""
DIFF_FLAGS = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--find-renames",
)
_FILTER_KEY = re.compile(r"filter\.(.+)\.(clean|smudge|process|required)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Done:
    """A command that ran: its exit status and what it printed."""

    code: int
    out: bytes
    err: bytes

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")


def environment(config: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a git command: PASSED of the server's, ours, `config` as command-line config
    (GIT_CONFIG_COUNT: out of the process list, and a key with `=` in it stays one key) and `extra`."""
    env = {name: os.environ[name] for name in PASSED if name in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(
        LC_ALL="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        XDG_CONFIG_HOME=os.devnull,  # no ~/.config/git/ignore or attributes either
        GIT_ALLOW_PROTOCOL=PROTOCOLS,
        GIT_SSH_COMMAND="ssh -o BatchMode=yes",
        GIT_PAGER="cat",
        GIT_EDITOR=":",
        GIT_AUTHOR_NAME=SERVER_NAME,
        GIT_AUTHOR_EMAIL=SERVER_EMAIL,
        GIT_COMMITTER_NAME=SERVER_NAME,
        GIT_COMMITTER_EMAIL=SERVER_EMAIL,
    )
    for i, (key, value) in enumerate((config or {}).items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    if config:
        env["GIT_CONFIG_COUNT"] = str(len(config))
    env.update(extra)
    return env


async def run(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    config: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    ok: Collection[int] = (0,),
    timeout_s: float = TIMEOUT_S,
    launcher: Launcher | None = None,
) -> Done:
    """`git *args`; GitError when it exits with a status not in `ok` or outlives `timeout_s` (its process
    group is killed, as it is when the caller is cancelled)."""
    full_env = environment(config, **(env or {}))
    argv = ["git", *args]
    command = launcher(argv, full_env) if launcher else argv
    what = next((a for a in args if not a.startswith("-")), "")
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=full_env,
        stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), timeout_s)
    except TimeoutError:
        raise GitError(f"git {what} timed out after {timeout_s:g} s") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    code = proc.returncode
    assert code is not None
    if code not in ok:
        tail = " ".join(err.decode("utf-8", "replace").split())[-STDERR_TAIL:]
        raise GitError(f"git {what} failed (exit {code}): {tail or 'no message'}")
    return Done(code, out, err)


class Worktree:
    """A checkout the agent could write, for the server's own git commands (module docstring)."""

    def __init__(self, path: Path, *, launcher: Launcher | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.path = path
        self.launcher = launcher
        self.timeout_s = timeout_s
        self._config: dict[str, str] | None = None

    @property
    def git_dir(self) -> Path:
        return self.path / ".git"

    def check(self) -> None:
        """RepoError unless the checkout's `.git` is a folder of its own: a link or a `gitdir:` file would
        point the server's commands at another repository."""
        try:
            mode = os.lstat(self.git_dir).st_mode
        except FileNotFoundError:
            raise RepoError(f"the checkout {self.path} has no .git folder any more") from None
        if not stat.S_ISDIR(mode):
            raise RepoError(
                f"the checkout's {self.git_dir} is not a folder (a link or a file); left as it is"
            )

    async def git(self, *args: str, input: bytes | None = None, ok: Collection[int] = (0,)) -> Done:
        """`git *args` on the checkout, under HARDENED and with each of its filter drivers turned off."""
        if self._config is None:
            self.check()
            names = ["config", "--null", "--name-only", "--get-regexp", r"^filter\."]
            found = await self._run(names, HARDENED, ok=(0, 1))  # 1: none
            drivers = {
                m.group(1) for k in found.out.split(b"\0") if (m := _FILTER_KEY.fullmatch(os.fsdecode(k)))
            }
            off = {f"filter.{d}.{k}": "" for d in sorted(drivers) for k in ("clean", "smudge", "process")}
            self._config = {**HARDENED, **off, **{f"filter.{d}.required": "false" for d in sorted(drivers)}}
        return await self._run(list(args), self._config, input=input, ok=ok)

    async def _run(
        self,
        args: list[str],
        config: Mapping[str, str],
        input: bytes | None = None,
        ok: Collection[int] = (0,),
    ) -> Done:
        where = [f"--git-dir={self.git_dir}", f"--work-tree={self.path}"]
        return await run(
            [*where, *args],
            cwd=self.path,
            config=config,
            env={"GIT_ALLOW_PROTOCOL": ""},  # no fetch, lazy or not, from a checkout's remotes
            input=input,
            ok=ok,
            timeout_s=self.timeout_s,
            launcher=self.launcher,
        )
