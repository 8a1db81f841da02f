"""One principal's checkout is no other's: a real server (SQLite, API keys for alice and bob) runs the
`ndjson` fake coding agent (tests/support/fakes/repo_agent.py) in its jail on checkouts of one repository.
Bob cannot name alice's checkout or the server's mirror as his repository (not even with REPO_ALLOW holding
the folder they are in), his agent cannot read them from its jail, no API of the server shows him her task
or its change, and his task in her context's id works on a checkout of his own."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.jail.sandbox import principal_key
from tests.cli.test_repository import AGENT, diff_v03, make_origin, summary_v03
from tests.conftest import make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.clis import FAKES, wait_until_stopped
from tests.support.rpc import call, result, text_message


class Two:
    def __init__(self, base_url: str, root: Path) -> None:
        self.base_url, self.root = base_url, root

    @property
    def url(self) -> str:
        return f"file://{self.root / 'remote' / 'project.git'}"

    def workspace(self, principal: str, context_id: str) -> Path:
        return self.root / "ws" / principal_key(principal) / context_id

    def client(self, principal: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=60, headers=key_of(principal))

    async def send(self, principal: str, text: str, repository: Any = None, **fields: Any) -> dict:
        message = text_message(text, **fields)
        if repository is not None:
            message["metadata"] = {"repository": repository}
        async with self.client(principal) as c:
            task = await result(c, "message/send", {"message": message})
            return await wait_until_stopped(c, task)


@pytest.fixture(scope="module")
async def two(tmp_path_factory: Any) -> AsyncIterator[Two]:
    tmp = tmp_path_factory.mktemp("isolation")
    make_origin(tmp / "remote" / "project.git", tmp / "work")
    env = {
        **api_keys_env(),
        "AGENT_ADAPTER": "ndjson",
        "AGENT_COMMAND": AGENT,
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        "AGENT_SANDBOX_READ": str(FAKES),
        "CANCEL_GRACE_S": "2",
        "REPO_ALLOW": str(tmp),  # every folder of the test, the workspaces' and the cache's too
        "REPO_CACHE_ROOT": str(tmp / "cache"),
    }
    server = await make_server("sqlite", tmp, **env)
    try:
        yield Two(server.base_url, tmp)
    finally:
        server.stop()


async def test_bob_reaches_alices_checkout_neither_from_his_agent_nor_through_the_api(two: Two) -> None:
    alices = await two.send("alice", "EDIT", {"url": two.url})
    assert alices["status"]["state"] == "completed", alices["status"]
    checkout = two.workspace("alice", alices["contextId"])
    assert (checkout / "notes.md").is_file() and (checkout / ".git").is_dir()
    (mirror,) = (two.root / "cache").glob("*.git")

    async with two.client("bob") as bob:
        for url in (str(checkout), f"file://{checkout}", str(mirror), f"file://{two.root / 'ws'}"):
            refused = await call(
                bob,
                "message/send",
                {"message": {**text_message("EDIT"), "metadata": {"repository": {"url": url}}}},
            )
            assert refused["error"]["code"] == -32602, (url, refused)
        listed = (await bob.get("/a2a/rest/tasks")).json()["tasks"]
        assert alices["id"] not in [t["id"] for t in listed]
        got = await call(bob, "tasks/get", {"id": alices["id"]})
        assert got["error"]["code"] == -32001, got
        v10 = await bob.get(f"/a2a/rest/tasks/{alices['id']}", headers={"A2A-Version": "1.0"})
        assert v10.status_code == 404, v10.text

    for secret in (checkout / "notes.md", checkout / ".git" / "config", mirror / "config"):
        peek = await two.send("bob", f"ENV {secret}", {"url": two.url})
        assert peek["status"]["state"] == "completed", peek["status"]
        said = "".join(
            p["text"] for a in peek["artifacts"] if a["name"] == "assistant-response" for p in a["parts"]
        )
        assert json.loads(said.split("worked in")[0])["file"].startswith("unreadable"), secret

    # Bob's task in alice's context id works in a checkout of his own, from the base: her change is not his.
    his = await two.send("bob", "SECOND", {"url": two.url}, contextId=alices["contextId"])
    assert his["status"]["state"] == "completed", his["status"]
    assert summary_v03(his)["base"] == summary_v03(alices)["base"]
    assert [f["path"] for f in summary_v03(his)["files"]] == ["README.md"]
    assert b"notes.md" not in diff_v03(his, "changes.diff")
    assert two.workspace("bob", alices["contextId"]) != checkout
    assert not (two.workspace("bob", alices["contextId"]) / "notes.md").exists()
