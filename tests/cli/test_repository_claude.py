"""Repository in, change out, with the real Claude Code CLI (pinned, from npm) as the agent.

A real server process (SQLite, AGENT_ADAPTER=claude-code, in its bubblewrap jail whose egress reaches only
the fake model API) takes a task naming a bare repository the test made (file://, under REPO_ALLOW). The
fake Anthropic API (tests/support/fakes/anthropic.py) answers the prompt's `EDIT:`/`WRITE:` lines with
Claude's own file tools (`Read` and `Edit`, `Write`), which the CLI runs in the context's checkout; the turn's
end publishes the change, and the test checks it against git: the diff applies at the base and rebuilds the
tree Claude left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from tests.agents.repos.conftest import git
from tests.cli.test_cli_claude import CLAUDE_ENV
from tests.cli.test_repository import diff_v03, make_origin, summary_v03
from tests.conftest import make_server
from tests.support.clis import CLI_BIN, install_clis, response_text, status_text, wait_until_stopped
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.rpc import result, text_message

FIRST = (
    "Make main return 2 and add notes\nEDIT: src/app.py | return 1 | return 2\nWRITE: notes.md | by claude"
)
SECOND = "Now make it 3\nEDIT: src/app.py | return 2 | return 3"


class Served:
    def __init__(self, client: httpx.AsyncClient, root: Path, bare: Path, fake: FakeAnthropic) -> None:
        self.client, self.root, self.bare, self.fake = client, root, bare, fake

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]


@pytest.fixture(scope="module")
async def served(tmp_path_factory: Any) -> AsyncIterator[Served]:
    install_clis()
    tmp = tmp_path_factory.mktemp("claude-repos")
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    fake = FakeAnthropic().start()
    env = {
        "AGENT_ADAPTER": "claude-code",
        "CLAUDE_BIN": str(CLI_BIN / "claude"),
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        **CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": fake.url,
        "AGENT_ENV_PASSTHROUGH": ",".join(CLAUDE_ENV),
        "AGENT_EGRESS_ALLOW": fake.url.removeprefix("http://"),
        "CANCEL_GRACE_S": "2",
        "REPO_ALLOW": str(allowed),
        "REPO_CACHE_ROOT": str(tmp / "cache"),
    }
    server = await make_server("sqlite", tmp, **env)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield Served(client, tmp, allowed / "project.git", fake)
    finally:
        server.stop()
        fake.stop()


async def send(served: Served, text: str, **fields: Any) -> dict:
    """`message/send` (v0.3) naming the repository, and the task once its turn ended."""
    message = text_message(text, **fields)
    message["metadata"] = {"repository": {"url": f"file://{served.bare}", "ref": "main"}}
    task = await result(served.client, "message/send", {"message": message})
    return await wait_until_stopped(served.client, task, within_s=120)


def clone_at(served: Served, base: str, where: Path) -> Path:
    git("clone", "--quiet", str(served.bare), str(where))
    git("checkout", "--quiet", base, cwd=where)
    return where


async def test_claudes_file_edits_come_back_as_a_diff_that_applies_at_the_base(
    served: Served, tmp_path: Path
) -> None:
    task = await send(served, FIRST)
    assert task["status"]["state"] == "completed", status_text(task)
    assert response_text(task).endswith("Done: the tool succeeded."), "a file tool failed"
    ws = served.workspace(task)
    assert (ws / "src" / "app.py").read_text() == "def main():\n    return 2\n"
    assert (ws / "notes.md").read_text() == "by claude\n"

    summary = summary_v03(task)
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]
    assert summary["branch"] == branch and git("symbolic-ref", "--short", "HEAD", cwd=ws) == branch
    assert summary["base"] == git("rev-parse", "main", cwd=served.bare)
    assert sorted((f["path"], f["status"], f["added"], f["deleted"]) for f in summary["files"]) == [
        ("notes.md", "added", 1, 0),
        ("src/app.py", "modified", 1, 1),
    ]
    assert [c["subject"] for c in summary["commits"]] == ["Make main return 2 and add notes"]
    assert git("status", "--porcelain", cwd=ws) == "", "the server committed what Claude left"

    patch = diff_v03(task, "changes.diff")
    assert b"-    return 1\n+    return 2\n" in patch and b"+by claude\n" in patch
    assert diff_v03(task, "turn-1.diff") == patch
    fresh = clone_at(served, summary["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=patch)
    assert (fresh / "src" / "app.py").read_text() == "def main():\n    return 2\n"
    assert (fresh / "notes.md").read_text() == "by claude\n"
    assert git("write-tree", cwd=fresh) == git("rev-parse", "HEAD^{tree}", cwd=ws)


async def test_the_next_turn_resumes_claudes_session_on_the_checkout_and_its_diff_holds_only_its_edit(
    served: Served, tmp_path: Path
) -> None:
    first = await send(served, FIRST)
    assert first["status"]["state"] == "completed", status_text(first)
    second = await send(served, SECOND, contextId=first["contextId"])
    assert second["status"]["state"] == "completed", status_text(second)
    assert response_text(second).endswith("Done: the tool succeeded."), "a file tool failed"
    assert any(p[:2] == [FIRST, SECOND] for p in served.fake.prompts()), "Claude resumed its session"

    summary = summary_v03(second)
    assert summary["turn"]["number"] == 1, "the second task's first turn"
    assert summary["turn"]["start"] == summary_v03(first)["head"]
    assert [(f["path"], f["added"], f["deleted"]) for f in summary["turn"]["files"]] == [("src/app.py", 1, 1)]
    turn = diff_v03(second, "turn-1.diff")
    assert b"-    return 2\n+    return 3\n" in turn and b"notes.md" not in turn
    whole = diff_v03(second, "changes.diff")
    assert b"-    return 1\n+    return 3\n" in whole and b"+by claude\n" in whole

    ws = served.workspace(second)
    fresh = clone_at(served, summary["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=diff_v03(first, "changes.diff"))
    git("apply", "--index", cwd=fresh, input=turn)
    assert (fresh / "src" / "app.py").read_text() == "def main():\n    return 3\n"
    assert git("write-tree", cwd=fresh) == git("rev-parse", "HEAD^{tree}", cwd=ws)
