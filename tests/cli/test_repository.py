"""Repository in, change out, end to end: a real server process (SQLite) runs the `ndjson` adapter in its jail
with a fake coding agent (tests/support/fakes/repo_agent.py) on a checkout of a bare repository the test
made, served over file://, and the change comes back as artifacts over both protocol versions."""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.agents.cli.repository import EXTENSION_URI
from app.agents.cli.run import WAITING
from app.agents.jail.sandbox import principal_key
from app.agents.repos.source import RepoSource
from app.api.edge.auth import ANONYMOUS
from tests.agents.repos.conftest import commit_all, git, tree_of
from tests.conftest import make_server
from tests.support.clis import FAKES, get_task, status_text, wait_until_stopped
from tests.support.loopback import Loopback, QuietHandler
from tests.support.rpc import call, result, text_message

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
AGENT = shlex.join([PYTHON, str(FAKES / "repo_agent.py")])
V10 = {"A2A-Version": "1.0"}
URL_MAX_BYTES = 65536
"""ATTACHMENT_MAX_BYTES of the `served` server."""
SPEC = "the spec, served over http\n"


class Files(QuietHandler):
    """Files by URL: `/docs/spec.txt`, `/endless` (a body that never ends unless the reader stops), and
    `/to-metadata` (a redirect to the cloud metadata address)."""

    def do_GET(self) -> None:
        if self.path == "/docs/spec.txt":
            self.reply(SPEC.encode(), "text/plain")
        elif self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 4096)
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()


@pytest.fixture(scope="module")
def files() -> Any:
    """The loopback server the files by URL come from (its base URL)."""
    server = Loopback(Files)
    try:
        yield server.url
    finally:
        server.close()


class Served:
    def __init__(self, client: httpx.AsyncClient, root: Path, bare: Path, other: Path, outside: Path) -> None:
        self.client, self.root, self.bare, self.other, self.outside = client, root, bare, other, outside

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def workspace(self, context_id: str) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / context_id

    @property
    def home(self) -> Path:
        """The CLIs' HOME (the principal's), where the fake agent's `GATE` step waits for its gate."""
        return self.root / "ws" / principal_key(ANONYMOUS) / ".home"


def make_origin(bare: Path, work: Path) -> None:
    """A bare repository with one commit on main: a file to edit, one to delete, a README."""
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("init", "--quiet", "--initial-branch=main", str(work))
    (work / "README.md").write_text("# Project\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("def main():\n    return 1\n")
    (work / "old.txt").write_text("to be deleted\n")
    (work / "CHANGES.md").write_text("")
    commit_all(work, "first")
    git("remote", "add", "origin", str(bare), cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)


@pytest.fixture(scope="module")
async def served(tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("repos")
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    make_origin(allowed / "other.git", tmp / "work-other")
    make_origin(tmp / "elsewhere" / "project.git", tmp / "work-elsewhere")
    pinned = {"adapter": "ndjson", "repository": {"url": f"file://{allowed / 'other.git'}", "ref": "main"}}
    env = {
        "AGENTS": json.dumps(
            {
                "default": {"adapter": "ndjson"},
                "twin": {"adapter": "ndjson"},
                "pinned": pinned,
                "echo": {"adapter": "echo"},
            }
        ),
        "AGENT_COMMAND": AGENT,
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        "AGENT_SANDBOX_READ": str(FAKES),
        "CANCEL_GRACE_S": "2",
        "REPO_ALLOW": str(allowed),
        "REPO_CACHE_ROOT": str(tmp / "cache"),
        "REPO_MAX_DIFF_BYTES": "4096",
        "ATTACHMENT_MAX_BYTES": str(URL_MAX_BYTES),
        "ATTACHMENT_URL_ALLOWED_CIDRS": "127.0.0.0/8",
    }
    server = await make_server("sqlite", tmp, **env)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield Served(
                client, tmp, allowed / "project.git", allowed / "other.git", tmp / "elsewhere" / "project.git"
            )
    finally:
        server.stop()


async def send(
    served: Served, text: str, repository: Any = None, parts: list | None = None, **fields: Any
) -> dict:
    """`message/send` (v0.3) and the task once its turn ended."""
    message = text_message(text, **fields)
    if repository is not None:
        message["metadata"] = {"repository": repository}
    message["parts"] += parts or []
    task = await result(served.client, "message/send", {"message": message})
    return await wait_until_stopped(served.client, task)


def artifact(task: dict, name: str) -> dict:
    found = [a for a in task.get("artifacts", []) if a.get("name") == name]
    assert len(found) == 1, [a.get("name") for a in task.get("artifacts", [])]
    return found[0]


def diff_v03(task: dict, name: str) -> bytes:
    (part,) = artifact(task, name)["parts"]
    assert part["kind"] == "file" and part["file"]["mimeType"] == "text/x-diff"
    return base64.b64decode(part["file"]["bytes"])


def summary_v03(task: dict) -> dict:
    (part,) = artifact(task, "changes")["parts"]
    assert part["kind"] == "data"
    return part["data"]


def fresh_clone(served: Served, base: str, where: Path) -> Path:
    git("clone", "--quiet", str(served.bare), str(where))
    git("checkout", "--quiet", base, cwd=where)
    return where


async def rpc_at(served: Served, role_path: str, params: dict) -> dict:
    """A blocking `message/send` (v0.3) to a role's endpoint: the whole response."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {**params, "configuration": {"blocking": True}},
    }
    return (await served.client.post(f"{role_path}/a2a/jsonrpc", json=body)).json()


async def task_count(served: Served) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    return (await served.client.post("/a2a/jsonrpc", json=body, headers=V10)).json()["result"]["totalSize"]


async def test_the_task_diff_applies_to_the_base_and_rebuilds_the_agents_tree(
    served: Served, tmp_path: Path
) -> None:
    task = await send(served, "EDIT", {"url": served.url, "ref": "main"})
    assert task["status"]["state"] == "completed", task["status"]
    ws = served.workspace(task["contextId"])
    branch = "a2a/" + task["contextId"].replace("-", "")[:8]
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == branch
    assert git("status", "--porcelain", cwd=ws) == "", "the server committed what the agent left"

    summary = summary_v03(task)
    assert summary["branch"] == branch
    assert summary["head"] == git("rev-parse", "HEAD", cwd=ws)
    assert summary["base"] == git("rev-parse", "main", cwd=served.bare)
    assert sorted((f["path"], f["status"], f["binary"]) for f in summary["files"]) == [
        ("blob.bin", "added", True),
        ("notes.md", "added", False),
        ("old.txt", "deleted", False),
        ("src/app.py", "modified", False),
    ]
    assert {f["path"]: (f["added"], f["deleted"]) for f in summary["files"]}["notes.md"] == (3, 0)
    authors = [c["author"] for c in summary["commits"]]
    assert authors == ["Fake Agent <agent@example.com>", "a2a-server <a2a-server@localhost>"]
    assert summary["commits"][1]["subject"] == "EDIT"
    assert summary["turn"]["number"] == 1 and summary["turn"]["files"] == summary["files"]

    patch = diff_v03(task, "changes.diff")
    assert diff_v03(task, "turn-1.diff") == patch
    fresh = fresh_clone(served, summary["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=patch)
    assert tree_of(fresh) == tree_of(ws)
    assert git("write-tree", cwd=fresh) == git("rev-parse", "HEAD^{tree}", cwd=ws)


async def test_a_second_task_in_the_context_keeps_the_checkout_and_its_turn_holds_only_its_change(
    served: Served, tmp_path: Path
) -> None:
    first = await send(served, "EDIT", {"url": served.url})
    context = first["contextId"]
    before = summary_v03(first)
    # The follow-up names no repository and comes over v1.0: the context's checkout is kept.
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "SECOND"}]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**message, "contextId": context}},
    }
    resp = await served.client.post("/a2a/jsonrpc", json=body, headers=V10)
    second = resp.json()["result"]["task"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED", second["status"]
    by_name = {a["name"]: a for a in second["artifacts"]}
    (data,) = by_name["changes"]["parts"]
    summary = data["data"]
    assert (summary["branch"], summary["base"]) == (before["branch"], before["base"])
    assert summary["turn"]["start"] == before["head"]
    assert [f["path"] for f in summary["turn"]["files"]] == ["README.md"]
    assert len(summary["files"]) == 5, "the branch's change holds both turns"
    (turn,) = by_name["turn-1.diff"]["parts"]
    assert turn["mediaType"] == "text/x-diff" and turn["filename"] == "turn-1.diff"
    patch = base64.b64decode(turn["raw"])
    assert b"README.md" in patch and b"notes.md" not in patch
    (whole,) = by_name["changes.diff"]["parts"]
    ws = served.workspace(context)
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == before["branch"]
    # Each turn's patch applies on the one before: the first's, then the second's, give the branch's tree.
    fresh = fresh_clone(served, before["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=diff_v03(first, "changes.diff"))
    git("apply", "--index", cwd=fresh, input=patch)
    assert git("write-tree", cwd=fresh) == git("rev-parse", "HEAD^{tree}", cwd=ws)
    assert base64.b64decode(whole["raw"]) == git_diff(ws, before["base"])


def git_diff(ws: Path, base: str) -> bytes:
    import subprocess

    from tests.agents.repos.conftest import ENV

    done = subprocess.run(
        ["git", "diff", "--binary", "--find-renames", base, "HEAD", "--"],
        cwd=ws,
        env=ENV,
        capture_output=True,
        check=True,
    )
    return done.stdout


async def test_a_question_ends_a_turn_and_the_answer_starts_the_next(served: Served) -> None:
    asked = await send(served, "ASK", {"url": served.url})
    assert asked["status"]["state"] == "input-required", asked["status"]
    first = diff_v03(asked, "turn-1.diff")
    assert b"+- before asking" in first
    done = await wait_until_stopped(
        served.client,
        await result(
            served.client,
            "message/send",
            {"message": text_message("yes", taskId=asked["id"], contextId=asked["contextId"])},
        ),
    )
    assert done["status"]["state"] == "completed", done["status"]
    second = diff_v03(done, "turn-2.diff")
    assert b"+- after yes" in second and b"+- before asking" not in second
    assert diff_v03(done, "turn-1.diff") == first, "the first turn's patch stays"
    assert summary_v03(done)["turn"]["number"] == 2


async def test_a_source_outside_repo_allow_is_refused_and_no_task_is_made(served: Served) -> None:
    count = await task_count(served)
    for version, headers in (("0.3", {}), ("1.0", V10)):
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "user" if version == "0.3" else "ROLE_USER",
            "parts": [{"kind": "text", "text": "EDIT"} if version == "0.3" else {"text": "EDIT"}],
            "metadata": {"repository": {"url": f"file://{served.outside}"}},
        }
        method = "message/send" if version == "0.3" else "SendMessage"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
        data = (await served.client.post("/a2a/jsonrpc", json=body, headers=headers)).json()
        assert data["error"]["code"] == -32602, data
        assert "REPO_ALLOW" in data["error"]["message"]
    assert await task_count(served) == count
    mirror = served.root / "cache" / f"{RepoSource(f'file://{served.outside}').key}.git"
    assert not mirror.exists(), "the refused repository was never fetched"


async def test_another_repository_in_the_same_context_is_refused(served: Served) -> None:
    first = await send(served, "nothing", {"url": served.url})
    count = await task_count(served)
    data = await call(
        served.client,
        "message/send",
        {
            "message": {
                **text_message("EDIT", contextId=first["contextId"]),
                "metadata": {"repository": {"url": f"file://{served.other}"}},
            }
        },
    )
    assert data["error"]["code"] == -32602 and "keeps the repository" in data["error"]["message"], data
    assert await task_count(served) == count


async def test_an_attachment_reaches_the_agents_workspace(served: Served) -> None:
    content = "the spec, line one\n"
    part = {
        "kind": "file",
        "file": {
            "bytes": base64.b64encode(content.encode()).decode(),
            "name": "docs/spec.txt",
            "mimeType": "text/plain",
        },
    }
    task = await send(served, "FILES", {"url": served.url}, parts=[part])
    assert task["status"]["state"] == "completed", task["status"]
    said = "".join(
        p["text"] for a in task["artifacts"] if a["name"] == "assistant-response" for p in a["parts"]
    )
    assert json.loads(said.split("worked in")[0]) == {"attachments/docs/spec.txt": content}
    ws = served.workspace(task["contextId"])
    assert (ws / "attachments" / "docs" / "spec.txt").read_text() == content
    assert "files" not in summary_v03(task) or summary_v03(task)["files"] == [], (
        "attachments are never the change"
    )


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../../x"])
async def test_a_path_out_of_the_attachments_is_refused_and_nothing_is_written(
    served: Served, name: str
) -> None:
    first = await send(served, "nothing", {"url": served.url})
    ws = served.workspace(first["contextId"])
    count = await task_count(served)
    part = {"kind": "file", "file": {"bytes": base64.b64encode(b"out").decode(), "name": name}}
    message = {
        **text_message("FILES", contextId=first["contextId"]),
        "metadata": {"repository": {"url": served.url}},
    }
    message["parts"].append(part)
    data = await call(served.client, "message/send", {"message": message})
    assert data["error"]["code"] == -32602 and "attachment" in data["error"]["message"], data
    assert await task_count(served) == count
    assert not (ws / "x").exists() and not (ws.parent / "x").exists() and not (ws / "attachments").exists()


async def test_a_file_by_url_is_fetched_into_the_agents_workspace_over_both_versions(
    served: Served, files: str
) -> None:
    """Loopback passes the SSRF guard only because the operator allows it (ATTACHMENT_URL_ALLOWED_CIDRS)."""
    part = {"kind": "file", "file": {"uri": f"{files}/docs/spec.txt", "mimeType": "text/plain"}}
    task = await send(served, "FILES", {"url": served.url}, parts=[part])
    assert task["status"]["state"] == "completed", task["status"]
    said = "".join(
        p["text"] for a in task["artifacts"] if a["name"] == "assistant-response" for p in a["parts"]
    )
    assert json.loads(said.split("worked in")[0]) == {"attachments/spec.txt": SPEC}, "named by its URL"
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "contextId": task["contextId"],
        "parts": [{"text": "FILES"}, {"url": f"{files}/docs/spec.txt", "filename": "in/notes.md"}],
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    second = (await served.client.post("/a2a/jsonrpc", json=body, headers=V10)).json()["result"]["task"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED", second["status"]
    assert (served.workspace(task["contextId"]) / "attachments" / "in" / "notes.md").read_text() == SPEC


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/endless", f"is longer, over the limit of {URL_MAX_BYTES} bytes (ATTACHMENT_MAX_BYTES)"),
        ("/to-metadata", "points to 169.254.169.254, a forbidden address (link-local (cloud metadata))"),
    ],
)
async def test_a_refused_file_by_url_fails_the_run_with_nothing_written(
    served: Served, files: str, path: str, says: str
) -> None:
    first = await send(served, "nothing", {"url": served.url})
    ws = served.workspace(first["contextId"])
    parts = [
        {"kind": "file", "file": {"bytes": base64.b64encode(b"inline").decode(), "name": "inline.txt"}},
        {"kind": "file", "file": {"uri": f"{files}{path}", "name": "f.txt"}},
    ]
    task = await send(served, "FILES", parts=parts, contextId=first["contextId"])
    assert task["status"]["state"] == "failed", task["status"]
    assert says in status_text(task), status_text(task)
    assert "attachment 'f.txt'" in status_text(task)
    assert not (ws / "attachments").exists(), "nothing written, not even the inline file"


async def test_the_card_declares_the_repository_extension(served: Served) -> None:
    card = (await served.client.get("/.well-known/agent-card.json")).json()
    (ext,) = [e for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION_URI]
    assert ext["required"] is False
    assert ext["params"]["metadata"]["repository"]["required"] == ["url"]
    assert "*/*" in card["defaultInputModes"]


async def test_the_diff_over_the_limit_is_cut_and_the_whole_patch_is_another_artifact(
    served: Served, tmp_path: Path
) -> None:
    task = await send(served, "BIG", {"url": served.url})
    whole = diff_v03(task, "changes-full.diff")
    assert len(whole) > 4096, "longer than REPO_MAX_DIFF_BYTES"
    shown = diff_v03(task, "changes.diff")
    assert b"[diff cut:" in shown and len(shown) < len(whole)
    assert summary_v03(task)["cut"] is True
    assert diff_v03(task, "turn-1.diff").startswith(shown[:1000]), "the turn's is cut alike"
    fresh = fresh_clone(served, summary_v03(task)["base"], tmp_path / "fresh")
    git("apply", "--index", cwd=fresh, input=whole)
    assert git("write-tree", cwd=fresh) == git(
        "rev-parse", "HEAD^{tree}", cwd=served.workspace(task["contextId"])
    )


async def test_a_roles_default_repository_is_the_one_a_task_naming_none_works_on(served: Served) -> None:
    data = await rpc_at(served, "/agents/pinned", {"message": text_message("SECOND")})
    task = data["result"]
    assert task["status"]["state"] == "completed", task["status"]
    summary = summary_v03(task)
    assert summary["repository"] == {"url": str(served.other), "ref": "main"}
    assert [f["path"] for f in summary["files"]] == ["README.md"]
    assert git("config", "remote.origin.url", cwd=served.workspace(task["contextId"])) == str(served.other)


async def test_an_agent_that_works_on_no_repository_refuses_one(served: Served) -> None:
    card = (await served.client.get("/agents/echo/.well-known/agent-card.json")).json()
    assert EXTENSION_URI not in json.dumps(card)
    message = {**text_message("hello"), "metadata": {"repository": {"url": served.url}}}
    data = await rpc_at(served, "/agents/echo", {"message": message})
    assert data["error"]["code"] == -32602 and "works on no repository" in data["error"]["message"], data


@pytest.fixture(scope="module")
async def closed(tmp_path_factory: Any) -> AsyncIterator[Served]:
    """A server whose REPO_ALLOW is empty (the default)."""
    tmp = tmp_path_factory.mktemp("closed")
    make_origin(tmp / "remote" / "project.git", tmp / "work")
    env = {"AGENT_ADAPTER": "ndjson", "AGENT_COMMAND": AGENT, "AGENT_WORKSPACE_ROOT": str(tmp / "ws")}
    server = await make_server("sqlite", tmp, **env, AGENT_SANDBOX_READ=str(FAKES))
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            bare = tmp / "remote" / "project.git"
            yield Served(client, tmp, bare, bare, bare)
    finally:
        server.stop()


async def test_without_repo_allow_the_card_declares_nothing_and_a_repository_is_refused(
    closed: Served,
) -> None:
    card = (await closed.client.get("/.well-known/agent-card.json")).json()
    assert EXTENSION_URI not in json.dumps(card)
    count = await task_count(closed)
    message = {**text_message("EDIT"), "metadata": {"repository": {"url": closed.url}}}
    data = await call(closed.client, "message/send", {"message": message})
    assert data["error"]["code"] == -32602 and "REPO_ALLOW lists no" in data["error"]["message"], data
    assert await task_count(closed) == count
    plain = await send(closed, "nothing")
    assert plain["status"]["state"] == "completed", plain["status"]
    assert [a["name"] for a in plain["artifacts"]] == ["assistant-response", "result"], "no change artifacts"


async def test_a_file_by_url_on_a_private_address_is_refused_by_default(closed: Served, files: str) -> None:
    """No ATTACHMENT_URL_ALLOWED_*: an address literal is refused at the edge, a name that resolves to one
    by the run; neither writes anything."""
    count = await task_count(closed)
    message = text_message("FILES")
    message["parts"].append({"kind": "file", "file": {"uri": f"{files}/docs/spec.txt"}})
    data = await call(closed.client, "message/send", {"message": message})
    assert data["error"]["code"] == -32602, data
    assert "127.0.0.1, a forbidden address (loopback)" in data["error"]["message"]
    assert await task_count(closed) == count
    port = files.rsplit(":", 1)[1]
    part = {"kind": "file", "file": {"uri": f"http://localhost:{port}/docs/spec.txt"}}
    task = await send(closed, "FILES", parts=[part])
    assert task["status"]["state"] == "failed", task["status"]
    assert "the host localhost points to" in status_text(task) and "(loopback)" in status_text(task)
    assert not closed.workspace(task["contextId"]).exists()


async def test_a_stream_carries_the_change_before_the_turns_last_status(served: Served) -> None:
    message = {**text_message("EDIT"), "metadata": {"repository": {"url": served.url}}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message}}
    seen: list[str] = []
    async with aconnect_sse(served.client, "POST", "/a2a/jsonrpc", json=body) as events:
        async for sse in events.aiter_sse():
            if not sse.data:
                continue
            item = sse.json()["result"]
            if item["kind"] == "artifact-update":
                seen.append(item["artifact"].get("name") or "")
            elif item["kind"] == "status-update" and item["status"]["state"] == "completed":
                seen.append("completed")
    changes = [n for n in seen if n in ("changes", "changes.diff", "turn-1.diff", "completed")]
    assert changes == ["changes", "changes.diff", "turn-1.diff", "completed"], seen


async def test_a_canceled_turn_publishes_nothing_and_the_next_turn_holds_its_work(served: Served) -> None:
    message = {**text_message("HANG"), "metadata": {"repository": {"url": served.url}}}
    task = await result(
        served.client, "message/send", {"message": message, "configuration": {"blocking": False}}
    )
    ws = served.workspace(task["contextId"])
    async with asyncio.timeout(30):
        while not (ws / "hang.txt").exists():
            await asyncio.sleep(0.1)
    canceled = await result(served.client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    assert not any(a["name"].startswith("changes") for a in canceled.get("artifacts", []))
    after = await send(served, "nothing", contextId=task["contextId"])
    assert after["status"]["state"] == "completed", after["status"]
    assert [f["path"] for f in summary_v03(after)["files"]] == ["hang.txt"]
    assert b"+written before the cancel" in diff_v03(after, "changes.diff")


async def twin(served: Served, method: str, params: dict) -> dict:
    """A call to the `twin` role (a second ndjson role: the same principal's workspaces): its result."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    data = (await served.client.post("/agents/twin/a2a/jsonrpc", json=body)).json()
    assert "error" not in data, data
    return data["result"]


async def test_two_runs_in_one_workspace_take_turns_and_the_second_starts_from_the_firsts_commits(
    served: Served,
) -> None:
    """Two roles' tasks in one context share its workspace (the edge's one-open-task rule is per role): the
    second run waits, saying so, until the first has ended its turn, then works on its commits. The first
    holds the workspace at a gate the test opens, so the overlap is forced."""
    message = {**text_message("GATE"), "metadata": {"repository": {"url": served.url}}}
    params = {"message": message, "configuration": {"blocking": False}}
    first = await result(served.client, "message/send", params)
    context = first["contextId"]
    ws = served.workspace(context)
    gate = served.home / f"gate-{context}"
    try:
        async with asyncio.timeout(30):
            while not (ws / "gated.md").exists():
                await asyncio.sleep(0.05)
        second = await twin(
            served,
            "message/send",
            {"message": text_message("SECOND", contextId=context), "configuration": {"blocking": False}},
        )
        assert second["id"] != first["id"]
        async with asyncio.timeout(30):
            while WAITING not in status_text(second):
                assert second["status"]["state"] in ("submitted", "working"), second["status"]
                await asyncio.sleep(0.05)
                second = await twin(served, "tasks/get", {"id": second["id"]})
        assert (await get_task(served.client, first["id"]))["status"]["state"] == "working"
        assert git("status", "--porcelain", cwd=ws) == "?? gated.md", "the second run has not touched it"
    finally:
        gate.touch()
    first = await wait_until_stopped(served.client, first)
    assert first["status"]["state"] == "completed", first["status"]
    async with asyncio.timeout(60):
        while second["status"]["state"] not in ("completed", "failed"):
            await asyncio.sleep(0.1)
            second = await twin(served, "tasks/get", {"id": second["id"]})
    assert second["status"]["state"] == "completed", second["status"]
    before, after = summary_v03(first), summary_v03(second)
    assert [f["path"] for f in before["turn"]["files"]] == ["gated.md"]
    assert after["turn"]["start"] == before["head"], "the second run started from the first one's commit"
    assert [f["path"] for f in after["turn"]["files"]] == ["README.md"], "its turn holds its change only"
    assert sorted(f["path"] for f in after["files"]) == ["README.md", "gated.md"]
    patch = diff_v03(second, "turn-1.diff")
    assert b"README.md" in patch and b"gated.md" not in patch
    assert git("rev-parse", "HEAD", cwd=ws) == after["head"]
