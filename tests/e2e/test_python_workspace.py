"""A Python agent's workspace end to end: a real server process (SQLite) runs the workspace test agent
(tests/support/agents/workspace.py, `workspace = True`) on a checkout of a bare repository the test made,
served over file://; the edge checks its sources as for a CLI role, and the change comes back as artifacts."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.cli.repository import EXTENSION_URI
from app.agents.repos.source import RepoSource
from tests.agents.repos.conftest import git, tree_of
from tests.cli.test_repository import (
    Served,
    diff_v03,
    fresh_clone,
    make_origin,
    rpc_at,
    send,
    summary_v03,
    task_count,
)
from tests.conftest import make_server
from tests.support.clis import response_text
from tests.support.rpc import call, text_message

AGENTS = "tests.support.agents.workspace"


@pytest.fixture(scope="module")
async def served(tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("python-ws")
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    make_origin(tmp / "elsewhere" / "project.git", tmp / "work-elsewhere")
    agents = {
        "default": {"adapter": f"{AGENTS}:WorkspaceAgent"},
        "pinned": {
            "adapter": f"{AGENTS}:WorkspaceAgent",
            "repository": {"url": f"file://{allowed / 'project.git'}", "ref": "main"},
        },
        "plain": {"adapter": f"{AGENTS}:PlainAgent"},
    }
    env = {
        "AGENTS": json.dumps(agents),
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        "REPO_ALLOW": str(allowed),
        "REPO_CACHE_ROOT": str(tmp / "cache"),
    }
    server = await make_server("sqlite", tmp, **env)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            bare = allowed / "project.git"
            yield Served(client, tmp, bare, bare, tmp / "elsewhere" / "project.git")
    finally:
        server.stop()


async def test_the_agents_edits_come_back_as_a_diff_that_rebuilds_its_tree(
    served: Served, tmp_path: Path
) -> None:
    task = await send(served, "EDIT", {"url": served.url, "ref": "main"})
    assert task["status"]["state"] == "completed", task["status"]
    ws = served.workspace(task["contextId"])
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == branch
    assert git("status", "--porcelain", cwd=ws) == "", "the server committed what the agent left"
    summary = summary_v03(task)
    assert (summary["branch"], summary["base"]) == (branch, git("rev-parse", "main", cwd=served.bare))
    assert sorted((f["path"], f["status"]) for f in summary["files"]) == [
        ("notes.md", "added"),
        ("old.txt", "deleted"),
        ("src/app.py", "modified"),
    ]
    assert [c["subject"] for c in summary["commits"]] == ["EDIT"]
    patch = diff_v03(task, "changes.diff")
    assert diff_v03(task, "turn-1.diff") == patch
    fresh = fresh_clone(served, summary["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=patch)
    assert tree_of(fresh) == tree_of(ws)
    assert git("write-tree", cwd=fresh) == git("rev-parse", "HEAD^{tree}", cwd=ws)


async def test_an_attachment_reaches_the_agents_attachments(served: Served) -> None:
    content = "the spec, line one\n"
    part = {
        "kind": "file",
        "file": {"bytes": base64.b64encode(content.encode()).decode(), "name": "docs/spec.txt"},
    }
    task = await send(served, "FILES", {"url": served.url}, parts=[part])
    assert task["status"]["state"] == "completed", task["status"]
    assert json.loads(response_text(task)) == {"attachments/docs/spec.txt": content}
    assert summary_v03(task)["files"] == [], "attachments are never the change"


async def test_a_failed_turn_carries_its_change(served: Served) -> None:
    task = await send(served, "RAISE", {"url": served.url})
    assert task["status"]["state"] == "failed", task["status"]
    assert [f["path"] for f in summary_v03(task)["files"]] == ["half.txt"]
    assert b"+half done" in diff_v03(task, "changes.diff")


async def test_a_source_outside_repo_allow_is_refused_and_no_task_is_made(served: Served) -> None:
    count = await task_count(served)
    message = {**text_message("EDIT"), "metadata": {"repository": {"url": f"file://{served.outside}"}}}
    data = await call(served.client, "message/send", {"message": message})
    assert data["error"]["code"] == -32602 and "REPO_ALLOW" in data["error"]["message"], data
    assert await task_count(served) == count
    mirror = served.root / "cache" / f"{RepoSource(f'file://{served.outside}').key}.git"
    assert not mirror.exists(), "the refused repository was never fetched"


async def test_the_card_declares_the_extension_and_the_roles_default_is_checked_out(served: Served) -> None:
    card = (await served.client.get("/.well-known/agent-card.json")).json()
    (ext,) = [e for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION_URI]
    assert ext["params"]["metadata"]["repository"]["required"] == ["url"]
    task = (await rpc_at(served, "/agents/pinned", {"message": text_message("EDIT")}))["result"]
    assert task["status"]["state"] == "completed", task["status"]
    assert summary_v03(task)["repository"] == {"url": str(served.bare), "ref": "main"}


async def test_an_agent_without_workspace_declares_nothing_and_refuses_a_repository(served: Served) -> None:
    card = (await served.client.get("/agents/plain/.well-known/agent-card.json")).json()
    assert EXTENSION_URI not in json.dumps(card)
    message = {**text_message("WHERE"), "metadata": {"repository": {"url": served.url}}}
    data = await rpc_at(served, "/agents/plain", {"message": message})
    assert data["error"]["code"] == -32602 and "works on no repository" in data["error"]["message"], data
    task = (await rpc_at(served, "/agents/plain", {"message": text_message("WHERE")}))["result"]
    assert json.loads(response_text(task))["workspace"] is None
