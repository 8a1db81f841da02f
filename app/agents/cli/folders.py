"""Where a context's files live on this machine, each outside the others: the workspace (the CLI's, in its
jail), and beside it, out of the jail, what the server keeps about it: the CLI's session id (`.sessions/`)
and the tools its `allow_always` answers allow (`.sessions/<adapter>-allowed/`, swept with the session),
the repository the server recorded for it (`.repos/`, what its branch is pushed to), the lock that lets one
run at a time work there (`.locks/`, `workspace_lock.py`); the sweep's marks are `sweep.py`'s.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..approvals import Rule
from ..jail.sandbox import principal_root
from ..options import AgentOptions
from .sweep import LEDGERS
from .workspace_lock import FOLDER as LOCKS, WorkspaceLock

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def folder_name(context_id: str) -> str:
    """The context id when it is a safe folder name, else a hash of it (ids come from clients)."""
    if _SAFE_ID.fullmatch(context_id) and ".." not in context_id:
        return context_id
    return hashlib.sha256(context_id.encode()).hexdigest()[:32]


def workspace(options: AgentOptions, principal: str, context_id: str) -> Path:
    """The folder a CLI works in: AGENT_REPO_PATH (single-user), or
    `<AGENT_WORKSPACE_ROOT>/<principal hash>/<contextId>`."""
    if options.repo_path:
        return Path(options.repo_path).resolve()
    return principal_root(options, principal) / folder_name(context_id)


def session_file(options: AgentOptions, adapter: str, principal: str, context_id: str) -> Path:
    """Outside the workspace (a user's repository never gets our bookkeeping files) and out of the jail."""
    root = principal_root(options, principal) / ".sessions" / adapter
    return root / f"{folder_name(context_id)}.json"


def workspace_lock(options: AgentOptions, principal: str, context_id: str) -> WorkspaceLock | None:
    """The lock of the context's workspace, its file beside it and out of the jail (`workspace_lock.py`);
    None with AGENT_REPO_PATH, where every task works in one folder as it always has."""
    if options.repo_path:
        return None
    return WorkspaceLock(principal_root(options, principal) / LOCKS / f"{folder_name(context_id)}.lock")


def ledger_file(options: AgentOptions, principal: str, context_id: str) -> Path:
    """The server's record of a context's repository (what its branch is pushed to): beside the sessions,
    out of the workspace and the jail, where the agent cannot rewrite it."""
    return principal_root(options, principal) / LEDGERS / f"{folder_name(context_id)}.json"


def load_session_data(options: AgentOptions, adapter: str, principal: str, context_id: str) -> dict[str, Any]:
    """What an earlier turn of this principal's context left: `sessionId` (to resume it), and what the
    adapter keeps with it (Codex: the thread's usage so far); {} when nothing valid."""
    try:
        data = json.loads(session_file(options, adapter, principal, context_id).read_text())
    except (OSError, ValueError):
        return {}
    sid = data.get("sessionId") if isinstance(data, dict) else None
    return data if isinstance(sid, str) and sid else {}


def load_session(options: AgentOptions, adapter: str, principal: str, context_id: str) -> str | None:
    """The CLI session id an earlier turn of this principal's context left, to resume it."""
    return load_session_data(options, adapter, principal, context_id).get("sessionId")


def save_session(
    options: AgentOptions, adapter: str, principal: str, context_id: str, session_id: str, **extra: Any
) -> None:
    """Remember the session; what was kept with the same session stays unless `extra` replaces it."""
    path = session_file(options, adapter, principal, context_id)
    before = load_session_data(options, adapter, principal, context_id)
    data = {**before, **extra} if before.get("sessionId") == session_id else dict(extra)
    data["sessionId"] = session_id
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def allowed_file(options: AgentOptions, adapter: str, principal: str, context_id: str) -> Path:
    """The rules of a context's `allow_always` answers: beside its session (the sweep removes both), out of
    the jail, where the agent cannot add to them."""
    root = principal_root(options, principal) / ".sessions" / f"{adapter}-allowed"
    return root / f"{folder_name(context_id)}.json"


def load_allowed(options: AgentOptions, adapter: str, principal: str, context_id: str) -> list[Rule]:
    """What the context's earlier `allow_always` answers allow ([] when none, or nothing valid)."""
    try:
        data = json.loads(allowed_file(options, adapter, principal, context_id).read_text())
    except (OSError, ValueError):
        return []
    rules = data.get("rules") if isinstance(data, dict) else None
    return [r for r in map(Rule.parse, rules if isinstance(rules, list) else []) if r is not None]


def save_allowed(
    options: AgentOptions, adapter: str, principal: str, context_id: str, rules: list[Rule]
) -> None:
    path = allowed_file(options, adapter, principal, context_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rules": [r.wire() for r in rules]}))
    tmp.replace(path)
