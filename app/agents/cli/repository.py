"""A CLI run's repository and attached files: the context's checkout made (or found) and the message's files
written before the CLI starts, and at each end of a turn the change published as artifacts. A Python agent
that declares `workspace = True` gets the same from here, without a jail (`agents/workspace.py`).

When the message names a repository (`metadata.repository`, checked by `repos.policy.RepoPolicy` at the edge
and again here), or names none and the role has a default, the workspace becomes the context's checkout on
its branch `a2a/<context>` (`repos.cache.RepoCache.checkout`); a later turn naming none keeps the checkout
its context has. The message's file parts, inline or by URL (fetched first, through the SSRF guard:
`repos.fetch`), are written under `attachments/` (`write_attachments`) and the prompt names them. When the
turn ends (completed, input-required, failed) `repos.changes.collect` commits what the agent left
uncommitted and measures the change, with every git command on the checkout run in the task's jail
(`launcher`); then these artifacts, with ids stable per task:

| artifact id             | name                  | what                                                    |
|-------------------------|-----------------------|---------------------------------------------------------|
| `<task>-changes`        | `changes`             | data: branch, base, head, files, commits, the turn's    |
| `<task>-diff`           | `changes.diff`        | `text/x-diff`: the branch against its base (cut if long)|
| `<task>-diff-full`      | `changes-full.diff`   | the whole patch when the one above is cut (to 16 MiB)   |
| `<task>-turn-<n>`       | `turn-<n>.diff`       | `text/x-diff`: this turn's change alone (cut if long)   |

A canceled turn publishes nothing (the task has ended before its CLI is stopped): its work stays in the
checkout, and the next turn of the context commits it and shows it in its `changes.diff`.

When the task asks (`metadata.repository.push` on one of its messages) and the role allows it, a turn that
moved the branch pushes it (`repos.push`, from the server's mirror, with the role's credentials) and the
`changes` artifact says where (`pushed`) or why not (`pushError`). The remote and the branch are the
server's, never the checkout's: the agent may rewrite `.git/config` (`a2a.source`, `a2a.branch`,
`remote.origin.url`), so the source is the one the message named, else the one the server recorded for the
context when it made the checkout (`ledger`, a file out of the jail), and the branch is `a2a/<context>`; a
checkout whose recorded source differs is not pushed. The `changes` artifact names that source and branch
too, whenever the server knows them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..events import AgentEvent
from ..options import AgentOptions
from ..repos.attachments import write_attachments
from ..repos.cache import ATTACHMENTS, Checkout, RepoCache, task_branch
from ..repos.changes import Changes, Diff, collect, commit_message, head
from ..repos.credentials import Credentials
from ..repos.errors import RepoError
from ..repos.fetch import fetch_files
from ..repos.git import Launcher
from ..repos.policy import METADATA_KEY, PUSH_KEY, RepoPolicy
from ..repos.push import push
from ..repos.source import RepoSource
from ..sdk import Extension, Part, Request, data_part

log = logging.getLogger(__name__)

EXTENSION_URI = "urn:a2a-coding-server:repository:v1"
"""The card's extension for a task's repository (named as the role extension, `urn:a2a-coding-server:`)."""
DIFF_TYPE = "text/x-diff"
FULL_PATCH_MAX_BYTES = 16 * 1024 * 1024
"""The largest whole patch published as `changes-full.diff`; a larger one stays on the branch only (the
`changes` artifact says so: `fullPatch: false`)."""


def extension(options: AgentOptions) -> Extension:
    """What the card declares when repositories are taken (REPO_ALLOW set, no AGENT_REPO_PATH)."""
    return Extension(
        uri=EXTENSION_URI,
        description=(
            "Work on your git repository: name it in the message's metadata.repository ({url, ref}); "
            "the agent works on a checkout of it on the branch a2a/<context>, and each turn's end publishes "
            "the change as a unified diff (git apply takes it) and a summary of files and commits. "
            "Only sources the server's REPO_ALLOW lists are taken."
        ),
        required=False,
        params={
            "metadata": {
                METADATA_KEY: {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string", "description": "git URL, file:// URL or absolute path"},
                        "ref": {"type": "string", "description": "branch, tag or commit (default branch)"},
                        PUSH_KEY: {
                            "type": "boolean",
                            "description": "push the task's branch to the remote at each turn's end "
                            "(only where the role allows it: pushAllowed)",
                        },
                    },
                    "required": ["url"],
                }
            },
            "branch": "a2a/<first 8 hex digits of the contextId>",
            "attachments": (
                "file parts (inline, or an http(s) URL the server fetches) are written to "
                f"{ATTACHMENTS}/<name> in the workspace"
            ),
            "artifacts": {
                "changes": "data: {repository, branch, base, head, files, commits, cut, turn, "
                "pushed | pushError}",
                "changes.diff": f"{DIFF_TYPE}: the branch against its base",
                "changes-full.diff": f"{DIFF_TYPE}: the whole patch, when changes.diff is cut",
                "turn-<n>.diff": f"{DIFF_TYPE}: the change of turn n alone",
            },
            "pushAllowed": options.repos.push,
            "maxDiffBytes": options.repo_max_diff_bytes,
            "maxAttachmentBytes": options.attachment_max_bytes,
            "maxAttachmentsBytes": options.attachment_max_total_bytes,
        },
    )


class RunRepository:
    """One run's checkout and attached files (module docstring)."""

    def __init__(
        self,
        policy: RepoPolicy,
        cache: RepoCache,
        options: AgentOptions,
        request: Request,
        workspace: Path,
        ledger: Path | None = None,
    ) -> None:
        self.policy = policy
        self.cache = cache
        self.options = options
        self.request = request
        self.workspace = workspace
        self.ledger = ledger
        """Where the server records the context's source, out of the jail (None: nothing is pushed)."""
        self.checkout: Checkout | None = None
        self.source: RepoSource | None = None
        """The context's source as the server knows it (never read from the checkout): what is pushed to."""
        self.attached: list[str] = []
        """The attached files, relative to the workspace (`attachments/<name>`)."""
        self.since: str | None = None
        self.turn = 1 + sum(1 for m in request.history if m.role.value == "user")
        self.launcher: Launcher | None = None

    async def prepare(self, launcher: Launcher | None) -> None:
        """The checkout and the files, before the CLI starts; RepoError (the run fails with it) if refused.
        The files by URL are fetched first: one refused leaves the workspace as it was."""
        self.launcher = launcher
        message = self.request.message
        named = self.policy.named(message.metadata)
        m = self.policy
        files = m.attachments(message.parts)
        links = m.linked(message.parts)
        if links:
            room = m.max_attachments_bytes - sum(len(data) for _, data in files)
            files += await fetch_files(links, m.urls, m.max_attachment_bytes, room, m.url_timeout_s)
        if not self.options.repo_path:
            branch = task_branch(self.request.context_id)
            trusted = named
            if named is not None:
                self.checkout = await self.cache.checkout(named, self.workspace, branch, self.credentials)
            else:
                self.checkout = await self.cache.existing(self.workspace)
                if self.checkout is None and m.default is not None and _empty(self.workspace):
                    self.checkout = await self.cache.checkout(
                        m.default, self.workspace, branch, self.credentials
                    )
                    trusted = m.default
            self.source = self._recorded()
            if self.source is None and trusted is not None and self.checkout is not None:
                self.source = trusted
                self._record(trusted)
        if files:
            written = write_attachments(
                self.workspace, files, m.max_attachment_bytes, m.max_attachments_bytes
            )
            self.attached = [str(p.relative_to(self.workspace)) for p in written]
        if self.checkout is not None:
            self.since = await head(
                self.checkout, launcher=launcher, timeout_s=self.options.repo_git_timeout_s
            )

    @property
    def credentials(self) -> Credentials:
        """The role's, for the server's own git only: a fetch of a private remote, the push."""
        return self.options.push_credentials

    def prompt(self, text: str) -> str:
        """The message's text, and the attached files named."""
        if not self.attached:
            return text
        listed = "\n".join(f"- {name}" for name in self.attached)
        return f"{text}\n\nFiles attached to this message, in your working folder:\n{listed}"

    def described(self) -> dict[str, Any] | None:
        """The checkout, for a CLI that takes it as data (`ndjson`'s prompt line)."""
        c = self.checkout
        if c is None:
            return None
        return {"url": c.source.url, "ref": c.source.ref, "branch": c.branch, "base": c.base}

    async def turn_end(self) -> list[AgentEvent]:
        """The turn's change as artifacts (module docstring); none without a checkout. A failure to measure
        it is logged and published as the `changes` artifact's `error`, never the task's failure."""
        if self.checkout is None:
            return []
        task_id = self.request.task_id or ""
        turn, self.turn = self.turn, self.turn + 1
        try:
            changes = await collect(
                self.checkout,
                self.since,
                commit_message(self.request.message.text()),
                self.options.repo_max_diff_bytes,
                launcher=self.launcher,
                timeout_s=self.options.repo_git_timeout_s,
            )
        except (RepoError, OSError) as exc:
            log.warning("task %s: its change could not be measured: %s", task_id, exc)
            return [AgentEvent.artifact([data_part({"error": str(exc)})], f"{task_id}-changes", "changes")]
        pushed = (
            await self._push(changes) if self._push_asked() and changes.head != changes.turn.start else None
        )
        self.since = changes.head
        return artifacts(task_id, turn, self._reported(), changes, pushed)

    def _reported(self) -> Checkout:
        """The checkout as the artifact names it: the server's source and branch when it knows them, not
        what the checkout's agent-writable config says."""
        assert self.checkout is not None
        if self.source is None:
            return self.checkout
        branch = task_branch(self.request.context_id)
        return Checkout(self.checkout.path, self.source, branch, self.checkout.base)

    def _push_asked(self) -> bool:
        """One of the task's messages asks its branch pushed (`metadata.repository.push`)."""
        return any(
            isinstance(v := (m.metadata or {}).get(METADATA_KEY), Mapping) and v.get(PUSH_KEY) is True
            for m in [*self.request.history, self.request.message]
        )

    async def _push(self, changes: Changes) -> dict[str, Any]:
        """Push the branch's head (module docstring): `{"pushed": ...}` or `{"pushError": ...}`."""
        assert self.checkout is not None
        task_id = self.request.task_id or ""
        try:
            if not self.policy.push:
                raise RepoError("this agent does not push task branches: its role's push is off")
            source, branch = self.source, task_branch(self.request.context_id)
            if source is None:
                raise RepoError("the server has no record of this context's repository; not pushed")
            if (self.checkout.source.url, self.checkout.branch) != (source.url, branch):
                raise RepoError(
                    f"the checkout says it is of {self.checkout.source.url} on {self.checkout.branch}, "
                    f"not of {source.url} on {branch} as the server made it; not pushed"
                )
            target = Checkout(self.checkout.path, source, branch, self.checkout.base)
            creds = self.credentials
            if not self.cache.path(source).exists():
                await self.cache.mirror(source, creds)  # swept meanwhile: fetched again as at checkout
            ref = await push(
                self.cache,
                target,
                changes.head,
                token=creds.token(),
                username=creds.username,
                ssh_key_file=creds.ssh_key_file,
                timeout_s=self.options.repo_git_timeout_s,
            )
        except (RepoError, OSError) as exc:
            log.warning("task %s: its branch was not pushed: %s", task_id, exc)
            return {"pushError": str(exc)}
        return {"pushed": {"remote": source.url, "branch": branch, "ref": ref, "head": changes.head}}

    def _recorded(self) -> RepoSource | None:
        """The source the server recorded for this context (`ledger`), if any and readable."""
        return None if self.ledger is None else recorded(self.ledger)

    def _record(self, source: RepoSource) -> None:
        """Record the context's source out of the jail, for the later turns' push."""
        if self.ledger is None:
            return
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ledger.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"url": source.url, "ref": source.ref}))
        tmp.replace(self.ledger)


def recorded(ledger: Path) -> RepoSource | None:
    """The source a context's ledger file (out of the jail) records, None when it has none readable."""
    try:
        data = json.loads(ledger.read_text())
        return RepoSource(data["url"], data.get("ref"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def artifacts(
    task_id: str, turn: int, checkout: Checkout, changes: Changes, pushed: Mapping[str, Any] | None = None
) -> list[AgentEvent]:
    """The artifacts of a turn's end (module docstring)."""
    out: list[AgentEvent] = []
    task, this = changes.task, changes.turn
    if task.patch:
        out.append(
            AgentEvent.artifact([_diff(task.shown, "changes.diff")], f"{task_id}-diff", "changes.diff")
        )
        if task.cut and len(task.patch) <= FULL_PATCH_MAX_BYTES:
            full = [_diff(task.patch, "changes-full.diff")]
            out.append(AgentEvent.artifact(full, f"{task_id}-diff-full", "changes-full.diff"))
    if this.patch:
        name = f"turn-{turn}.diff"
        out.append(AgentEvent.artifact([_diff(this.shown, name)], f"{task_id}-turn-{turn}", name))
    summary = {
        "repository": {"url": checkout.source.url, "ref": checkout.source.ref},
        "branch": checkout.branch,
        **_measured(task),
        "base": changes.base,
        "committed": changes.committed,
        "fullPatch": not task.cut or len(task.patch) <= FULL_PATCH_MAX_BYTES,
        "turn": {"number": turn, "start": this.start, **_measured(this)},
        **(pushed or {}),
    }
    out.insert(0, AgentEvent.artifact([data_part(summary)], f"{task_id}-changes", "changes"))
    return out


def _measured(diff: Diff) -> dict[str, Any]:
    return {
        "head": diff.end,
        "files": [
            {
                "path": f.path,
                "status": f.status,
                "added": f.added,
                "deleted": f.deleted,
                "binary": f.binary,
                **({"oldPath": f.old_path} if f.old_path else {}),
            }
            for f in diff.files
        ],
        "commits": [{"sha": c.sha, "subject": c.subject, "author": c.author} for c in diff.commits],
        "bytes": len(diff.patch),
        "cut": diff.cut,
    }


def _diff(patch: bytes, name: str) -> Part:
    return Part(raw=patch, media_type=DIFF_TYPE, filename=name)


def _empty(path: Path) -> bool:
    try:
        return not any(path.iterdir())
    except FileNotFoundError:
        return True
    except NotADirectoryError:
        return False


def jail_launcher(wrap: Callable[..., list[str]], workspace: Path, home: Path) -> Launcher:
    """The server's git commands on a checkout, in the task's jail (`Jail.wrap`), without the egress relay:
    they need no network."""

    def launch(argv: list[str], env: Mapping[str, str]) -> list[str]:
        return wrap(argv, workspace, home, env, bridge=False)

    return launch
