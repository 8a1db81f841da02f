"""A CLI run's repository and attached files: the context's checkout made (or found) and the message's files
written before the CLI starts, and at each end of a turn the change published as artifacts. A Python agent
that declares `workspace = True` gets the same from here, without a jail (`agents/workspace.py`).

When the message names a repository (`metadata.repository`, checked by `repos.policy.RepoPolicy` at the edge
and again here), or names none and the role has a default, the workspace becomes the context's checkout on
its branch `a2a/<context>` (`repos.cache.RepoCache.checkout`); a later turn naming none keeps the checkout
its context has. The message's inline file parts are written under `attachments/` (`write_attachments`)
and the prompt names them. When the turn ends (completed, input-required, failed) `repos.changes.collect`
commits what the agent left uncommitted and measures the change, with every git command on the checkout
run in the task's jail (`launcher`); then these artifacts, with ids stable per task:

| artifact id             | name                  | what                                                    |
|-------------------------|-----------------------|---------------------------------------------------------|
| `<task>-changes`        | `changes`             | data: branch, base, head, files, commits, the turn's    |
| `<task>-diff`           | `changes.diff`        | `text/x-diff`: the branch against its base (cut if long)|
| `<task>-diff-full`      | `changes-full.diff`   | the whole patch when the one above is cut (to 16 MiB)   |
| `<task>-turn-<n>`       | `turn-<n>.diff`       | `text/x-diff`: this turn's change alone (cut if long)   |

A canceled turn publishes nothing (the task has ended before its CLI is stopped): its work stays in the
checkout, and the next turn of the context commits it and shows it in its `changes.diff`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..events import AgentEvent
from ..options import AgentOptions
from ..repos.attachments import write_attachments
from ..repos.cache import ATTACHMENTS, Checkout, RepoCache, task_branch
from ..repos.changes import Changes, Diff, collect, commit_message, head
from ..repos.errors import RepoError
from ..repos.git import Launcher
from ..repos.policy import METADATA_KEY, RepoPolicy
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
                    },
                    "required": ["url"],
                }
            },
            "branch": "a2a/<first 8 hex digits of the contextId>",
            "attachments": f"inline file parts are written to {ATTACHMENTS}/<name> in the workspace",
            "artifacts": {
                "changes": "data: {repository, branch, base, head, files, commits, cut, turn}",
                "changes.diff": f"{DIFF_TYPE}: the branch against its base",
                "changes-full.diff": f"{DIFF_TYPE}: the whole patch, when changes.diff is cut",
                "turn-<n>.diff": f"{DIFF_TYPE}: the change of turn n alone",
            },
            "maxDiffBytes": options.repo_max_diff_bytes,
            "maxAttachmentBytes": options.attachment_max_bytes,
            "maxAttachmentsBytes": options.attachment_max_total_bytes,
        },
    )


class RunRepository:
    """One run's checkout and attached files (module docstring)."""

    def __init__(
        self, policy: RepoPolicy, cache: RepoCache, options: AgentOptions, request: Request, workspace: Path
    ) -> None:
        self.policy = policy
        self.cache = cache
        self.options = options
        self.request = request
        self.workspace = workspace
        self.checkout: Checkout | None = None
        self.attached: list[str] = []
        """The attached files, relative to the workspace (`attachments/<name>`)."""
        self.since: str | None = None
        self.turn = 1 + sum(1 for m in request.history if m.role.value == "user")
        self.launcher: Launcher | None = None

    async def prepare(self, launcher: Launcher | None) -> None:
        """The checkout and the files, before the CLI starts; RepoError (the run fails with it) if refused."""
        self.launcher = launcher
        message = self.request.message
        named = self.policy.named(message.metadata)
        if not self.options.repo_path:
            branch = task_branch(self.request.context_id)
            if named is not None:
                self.checkout = await self.cache.checkout(named, self.workspace, branch)
            else:
                self.checkout = await self.cache.existing(self.workspace)
                if self.checkout is None and self.policy.default is not None and _empty(self.workspace):
                    self.checkout = await self.cache.checkout(self.policy.default, self.workspace, branch)
        files = self.policy.attachments(message.parts)
        if files:
            m = self.policy
            written = write_attachments(
                self.workspace, files, m.max_attachment_bytes, m.max_attachments_bytes
            )
            self.attached = [str(p.relative_to(self.workspace)) for p in written]
        if self.checkout is not None:
            self.since = await head(
                self.checkout, launcher=launcher, timeout_s=self.options.repo_git_timeout_s
            )

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
        self.since = changes.head
        return artifacts(task_id, turn, self.checkout, changes)


def artifacts(task_id: str, turn: int, checkout: Checkout, changes: Changes) -> list[AgentEvent]:
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
