"""Pushing a task's branch, end to end: a real server process runs the `ndjson` adapter in its jail with a
fake coding agent (tests/support/fakes/repo_agent.py) on a checkout of a repository served over smart HTTP
from loopback (tests/support/git_http.py), which takes a push only with the role's token. The branch reaches
the remote with its commits; the token reaches nothing the agent sees, no file under the server's folders
and no line of its log; an agent rewriting its checkout's config cannot redirect the push."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents.repos.conftest import git
from tests.cli.test_repository import AGENT, Served, make_origin, send, summary_v03
from tests.conftest import make_server
from tests.support.clis import FAKES
from tests.support.git_http import GitHttp, git_http
from tests.support.rpc import call, text_message

TOKEN = "tok-e2e-7b0c4f19d3a6"
BASIC = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()


class Pushing(Served):
    http: GitHttp
    token_file: Path
    log: Path

    @property
    def url(self) -> str:
        return f"{self.http.url}/project.git"

    @property
    def evil(self) -> str:
        return f"{self.http.url}/evil.git"


@pytest.fixture(scope="module")
async def pushing(tmp_path_factory: Any) -> AsyncIterator[Pushing]:
    tmp = tmp_path_factory.mktemp("push")
    remotes = tmp / "remote"
    make_origin(remotes / "project.git", tmp / "work")
    make_origin(remotes / "evil.git", tmp / "work-evil")
    make_origin(remotes / "secret.git", tmp / "work-secret")
    secret = tmp / "secret"
    secret.mkdir()
    token_file = secret / "push-token"
    token_file.write_text(f"{TOKEN}\n")
    wrong = secret / "wrong-token"
    wrong.write_text("tok-not-the-one-0000\n")
    with git_http(remotes, TOKEN, private=["secret.git"]) as http:
        roles = {
            "default": {"adapter": "ndjson", "push": True, "push_token_file": str(token_file)},
            "nopush": {"adapter": "ndjson"},
            "wrong": {"adapter": "ndjson", "push": True, "push_token_file": str(wrong)},
        }
        env = {
            "AGENTS": json.dumps(roles),
            "AGENT_COMMAND": AGENT,
            "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
            "AGENT_SANDBOX_READ": str(FAKES),
            "CANCEL_GRACE_S": "2",
            "REPO_ALLOW": f"{http.url}/",
            "REPO_CACHE_ROOT": str(tmp / "cache"),
            "LOG_LEVEL": "debug",
        }
        server = await make_server("sqlite", tmp, **env)
        try:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
                served = Pushing(client, tmp, remotes / "project.git", remotes / "evil.git", remotes)
                served.http, served.token_file, served.log = http, token_file, server.log_path
                yield served
        finally:
            server.stop()


def remote_head(bare: Path, branch: str) -> str | None:
    found = git("--git-dir", str(bare), "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
    return found or None


def holding(root: Path, *needles: str) -> list[Path]:
    """The files under `root` (links not followed) that hold any of `needles`."""
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and any(n.encode() in p.read_bytes() for n in needles)
    ]


async def test_push_creates_the_task_branch_on_the_remote_with_its_commits_and_no_agent_sees_the_token(
    pushing: Pushing,
) -> None:
    task = await send(pushing, f"ENV {pushing.token_file}", {"url": pushing.url, "push": True})
    assert task["status"]["state"] == "completed", task["status"]
    summary = summary_v03(task)
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]
    assert summary["pushed"] == {
        "remote": pushing.url,
        "branch": branch,
        "ref": f"refs/heads/{branch}",
        "head": summary["head"],
    }
    assert "pushError" not in summary
    assert remote_head(pushing.bare, branch) == summary["head"]
    pushed = git("--git-dir", str(pushing.bare), "rev-list", "--reverse", f"{summary['base']}..{branch}")
    assert pushed.split() == [c["sha"] for c in summary["commits"]] != []
    sent = [(path, auth) for path, auth in pushing.http.seen if auth and path.startswith("/project.git/")]
    assert sent and all("git-receive-pack" in path for path, _ in sent), "the token goes with the push only"

    said = "".join(
        p["text"] for a in task["artifacts"] if a["name"] == "assistant-response" for p in a["parts"]
    )
    seen = json.loads(said.split("worked in")[0])
    assert seen["file"].startswith("unreadable"), "the jail hides the token file"
    assert seen["environ"] and not [k for k, v in seen["environ"].items() if TOKEN in v or BASIC in v]
    ws = pushing.workspace(task["contextId"])
    assert (ws / "env.json").is_file() and TOKEN not in (ws / "env.json").read_text()
    assert holding(pushing.root / "ws", TOKEN, BASIC) == [], "no workspace, HOME or record holds it"
    assert holding(pushing.root / "cache", TOKEN, BASIC) == [], "nor the mirrors"
    log = pushing.log.read_text()
    assert task["id"] in log, "the server logs its tasks (at debug)"
    assert TOKEN not in log and BASIC not in log


async def test_an_agent_rewriting_its_checkouts_config_cannot_redirect_the_push_or_the_token(
    pushing: Pushing,
) -> None:
    first = await send(pushing, f"REDIRECT {pushing.evil}", {"url": pushing.url, "push": True})
    assert first["status"]["state"] == "completed", first["status"]
    context = first["contextId"]
    branch = "a2a/" + context.replace("-", "")[:8]
    ws = pushing.workspace(context)
    assert git("config", "a2a.source", cwd=ws) == pushing.evil, "the agent did rewrite its checkout"
    assert git("config", "remote.origin.url", cwd=ws) == pushing.evil
    head = summary_v03(first)["head"]
    assert summary_v03(first)["pushed"]["remote"] == pushing.url, "this turn's source is its message's"
    assert remote_head(pushing.bare, branch) == head

    later = await send(pushing, "SECOND", {"push": True}, contextId=context)
    assert later["status"]["state"] == "completed", later["status"]
    summary = summary_v03(later)
    assert "pushed" not in summary and "not pushed" in summary["pushError"], summary
    assert (summary["repository"]["url"], summary["branch"]) == (pushing.url, branch), "the server's, named"
    assert pushing.url in summary["pushError"] and TOKEN not in summary["pushError"]
    assert remote_head(pushing.bare, branch) == head, "the remote's branch stays at the first turn"
    assert remote_head(pushing.other, branch) is None and remote_head(pushing.other, "main") == git(
        "rev-parse", "main", cwd=pushing.root / "work-evil"
    ), "the other remote got nothing"
    assert [a for a in pushing.http.tokens_sent_to("evil.git") if a] == [], "nor the token"


async def test_a_push_the_remote_refuses_is_said_and_the_task_still_completes(pushing: Pushing) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                **text_message("SECOND"),
                "metadata": {"repository": {"url": pushing.url, "push": True}},
            },
            "configuration": {"blocking": True},
        },
    }
    task = (await pushing.client.post("/agents/wrong/a2a/jsonrpc", json=body)).json()["result"]
    assert task["status"]["state"] == "completed", task["status"]
    summary = summary_v03(task)
    assert "git push failed" in summary["pushError"] and "pushed" not in summary
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]
    assert remote_head(pushing.bare, branch) is None


async def test_push_asked_where_the_role_does_not_push_is_refused_before_any_task(pushing: Pushing) -> None:
    message = {**text_message("EDIT"), "metadata": {"repository": {"url": pushing.url, "push": True}}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    data = (await pushing.client.post("/agents/nopush/a2a/jsonrpc", json=body)).json()
    assert data["error"]["code"] == -32602, data
    assert (
        "does not push" in data["error"]["message"]
        and data["error"]["data"]["field"] == "metadata.repository"
    )
    bad = {**text_message("EDIT"), "metadata": {"repository": {"url": pushing.url, "push": "yes"}}}
    data = await call(pushing.client, "message/send", {"message": bad})
    assert data["error"]["code"] == -32602 and "true or false" in data["error"]["message"], data


async def test_a_private_repository_is_fetched_with_the_roles_token_which_no_agent_sees(
    pushing: Pushing,
) -> None:
    """A remote that wants the token to fetch: the role with a credential checks it out (the server's git
    answers the remote's 401), the role without one fails the task saying the fetch failed, and the token
    is in neither agent's environment nor its workspace."""
    url = f"{pushing.http.url}/secret.git"
    task = await send(pushing, f"ENV {pushing.token_file}", {"url": url})
    assert task["status"]["state"] == "completed", task["status"]
    assert summary_v03(task)["repository"]["url"] == url
    said = "".join(
        p["text"] for a in task["artifacts"] if a["name"] == "assistant-response" for p in a["parts"]
    )
    seen = json.loads(said.split("worked in")[0])
    assert not [k for k, v in seen["environ"].items() if TOKEN in v or BASIC in v]
    sent = pushing.http.tokens_sent_to("secret.git")
    assert sent[0] is None and f"Basic {BASIC}" in sent, "asked for (401), then answered"

    message = {**text_message("EDIT"), "metadata": {"repository": {"url": url}}}
    params = {"message": message, "configuration": {"blocking": True}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
    refused = (await pushing.client.post("/agents/nopush/a2a/jsonrpc", json=body)).json()["result"]
    assert refused["status"]["state"] == "failed", refused["status"]
    text = json.dumps(refused["status"])
    assert "git fetch failed" in text and TOKEN not in text
    assert holding(pushing.root / "ws", TOKEN, BASIC) == []
    assert TOKEN not in pushing.log.read_text()
