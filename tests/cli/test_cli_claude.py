"""The real Claude Code CLI (pinned, from npm) as the task's agent, against a fake Anthropic API.

Everything goes through the A2A API of a real server process (SQLite) with AGENT_ADAPTER=claude-code:
the CLI binary runs for real, reads its prompt from stdin, calls the fake model on 127.0.0.1, runs its
tools in the task's workspace and answers permission requests through input-required. One server (with a
fresh HOME and workspace root) per group of scenarios that share settings.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from tests.conftest import make_server
from tests.support.clis import (
    CLI_BIN,
    alive,
    find_process,
    get_task,
    response_text,
    send_message,
    session_members,
    session_of,
    sessions_in,
    status_text,
    wait_for_process,
    wait_none_working_in,
    wait_until_stopped,
    working_in,
)
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.rpc import call, result, text_message
from tests.support.server import ServerProcess

CLAUDE_ENV = {
    "ANTHROPIC_BASE_URL": "",
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
"""What Claude Code needs in its environment: the server passes it on (AGENT_ENV_PASSTHROUGH)."""


async def _claude_server(tmp: Path, fake: FakeAnthropic, **env: str) -> ServerProcess:
    """In the default jail with egress: the fake model API is the only host the CLI may reach."""
    settings = {
        "AGENT_ADAPTER": "claude-code",
        "CLAUDE_BIN": str(CLI_BIN / "claude"),
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        **CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": fake.url,
        "AGENT_ENV_PASSTHROUGH": ",".join(CLAUDE_ENV),
        "AGENT_EGRESS_ALLOW": fake.url.removeprefix("http://"),
        "CANCEL_GRACE_S": "2",
    }
    return await make_server("sqlite", tmp, **{**settings, **env})


class Served:
    def __init__(self, server: ServerProcess, client: httpx.AsyncClient, root: Path) -> None:
        self.server, self.client, self.root = server, client, root

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]

    @property
    def home(self) -> Path:
        """The CLI's HOME: the (anonymous) principal's."""
        return self.root / "ws" / principal_key(ANONYMOUS) / ".home"


async def _serve(tmp: Path, fake: FakeAnthropic, **env: str) -> AsyncIterator[Served]:
    server = await _claude_server(tmp, fake, **env)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield Served(server, client, tmp)
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def unattended(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """AGENT_FORCE=true (the default): --dangerously-skip-permissions (the adapter sets IS_SANDBOX=1 in
    the jail, which Claude Code needs to allow it as root)."""
    async for served in _serve(tmp_path_factory.mktemp("claude-unattended"), fake_api):
        yield served


@pytest.fixture(scope="module")
async def approvals(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async for served in _serve(tmp_path_factory.mktemp("claude-approvals"), fake_api, AGENT_FORCE="false"):
        yield served


HARD_LIMIT_S = 20
"""AGENT_TIMEOUT_S of the hard-limit server: Claude Code (Node) must have started and printed the model's
first dots before it fires, however busy the machine."""


@pytest.fixture(scope="module")
async def idle_limit(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """A short idle limit (the default hard one): the idle test checks only that it ended the run, which a
    slow start cannot change."""
    tmp = tmp_path_factory.mktemp("claude-idle-limit")
    async for served in _serve(tmp, fake_api, AGENT_IDLE_TIMEOUT_S="3", CANCEL_GRACE_S="1"):
        yield served


@pytest.fixture(scope="module")
async def hard_limit(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """A short hard limit and an idle limit that never fires first (a busy machine's silent start-up counts
    against the idle limit), so neither limit races the other."""
    tmp = tmp_path_factory.mktemp("claude-hard-limit")
    limits = {"AGENT_IDLE_TIMEOUT_S": "600", "AGENT_TIMEOUT_S": str(HARD_LIMIT_S), "CANCEL_GRACE_S": "1"}
    async for served in _serve(tmp, fake_api, **limits):
        yield served


async def test_card_names_the_adapter(unattended: Served) -> None:
    card = (await unattended.client.get("/.well-known/agent-card.json")).json()
    assert card["name"] == "coding-agent-a2a (claude-code)"


async def test_text_task_streams_the_answer_as_artifact_chunks(unattended: Served) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": text_message("say hi")},
    }
    events: list[dict] = []
    async with aconnect_sse(unattended.client, "POST", "/a2a/jsonrpc", json=body) as src:
        async for sse in src.aiter_sse():
            if sse.data:
                events.append(json.loads(sse.data)["result"])
    assert events[-1]["kind"] == "status-update" and events[-1]["status"]["state"] == "completed"
    artifacts = [e for e in events if e["kind"] == "artifact-update"]
    rid = next(
        e["artifact"]["artifactId"] for e in artifacts if e["artifact"].get("name") == "assistant-response"
    )
    chunks = [e for e in artifacts if e["artifact"]["artifactId"] == rid]
    texts = [p["text"] for c in chunks for p in c["artifact"]["parts"]]
    assert "".join(texts) == "hi from the fake model"
    assert len([t for t in texts if t]) == 3, "each text delta of the model is its own chunk"
    assert [c["append"] for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert chunks[-1]["lastChunk"] is True
    session = [e["metadata"]["session"] for e in events if "session" in e.get("metadata", {})]
    assert session and session[0]["model"].startswith("claude-opus")
    final = await get_task(unattended.client, events[0]["id"])
    assert final["metadata"]["session"] == session[0]
    summary = next(a for a in final["artifacts"] if a.get("name") == "result")["parts"][0]["data"]
    assert summary["summary"] == "hi from the fake model"
    assert summary["stats"]["turns"] == 1 and summary["stats"]["cost_usd"] > 0


async def test_tool_runs_and_its_file_appears_in_the_workspace(unattended: Served) -> None:
    task = await send_message(unattended.client, "RUN: echo made-by-claude > marker.txt")
    task = await wait_until_stopped(unattended.client, task)
    assert task["status"]["state"] == "completed", status_text(task)
    assert (unattended.workspace(task) / "marker.txt").read_text().strip() == "made-by-claude"
    assert response_text(task).endswith("Done: the tool succeeded.")


async def test_next_turn_in_the_context_resumes_the_session_in_the_same_workspace(unattended: Served) -> None:
    first = await wait_until_stopped(
        unattended.client, await send_message(unattended.client, "RUN: echo one > turn1.txt")
    )
    assert first["status"]["state"] == "completed"
    second = await send_message(unattended.client, "RECALL", contextId=first["contextId"])
    second = await wait_until_stopped(unattended.client, second)
    assert second["status"]["state"] == "completed", status_text(second)
    assert response_text(second) == "The first prompt was: RUN: echo one > turn1.txt"
    assert (unattended.workspace(second) / "turn1.txt").exists()


async def test_api_error_fails_the_task_with_the_reason(unattended: Served) -> None:
    task = await wait_until_stopped(unattended.client, await send_message(unattended.client, "BADREQUEST"))
    assert task["status"]["state"] == "failed"
    assert "API Error: 400 fake bad" in status_text(task)


async def test_cli_exiting_non_zero_fails_the_task_with_its_stderr(unattended: Served) -> None:
    """The next turn resumes a session Claude no longer has (its `$HOME/.claude/projects/<munged
    cwd>/<session id>.jsonl` is gone): Claude 2.1.197 makes no model request, prints only a `result` of
    subtype `error_during_execution` (no `result` text), says why on stderr and exits 1. The task fails
    with the exit status and the stderr tail, as with Codex and Gemini."""
    c = unattended.client
    first = await wait_until_stopped(c, await send_message(c, "say hi"))
    assert first["status"]["state"] == "completed", status_text(first)
    session = first["metadata"]["session"]["sessionId"]
    # The task completes at Claude's `result` line; the transcript is complete once the process has exited.
    assert await wait_none_working_in(unattended.workspace(first)) == []
    stored = list((unattended.home / ".claude" / "projects").glob(f"*/{session}.jsonl"))
    assert len(stored) == 1, "Claude stored the session"
    stored[0].unlink()
    second = await wait_until_stopped(c, await send_message(c, "again", contextId=first["contextId"]))
    assert second["status"]["state"] == "failed"
    reason = status_text(second)
    assert reason.startswith("claude exited with status 1: "), reason
    assert f"No conversation found with session ID: {session}" in reason, reason
    assert await wait_none_working_in(unattended.workspace(second)) == []


async def test_a_second_task_in_a_context_with_one_running_is_refused_and_starts_no_cli(
    unattended: Served,
) -> None:
    """One workspace and one Claude session per context: while a task of the context runs, a new task
    there is refused (-32602 naming the open task) and no second CLI starts; once it has ended, the next
    task in the context runs and resumes the session."""
    c = unattended.client
    marker = f"sleep 300.{uuid.uuid4().int % 10_000_000:07d}"
    first = await send_message(c, f"RUN: {marker}", blocking=False)
    sleeper = await wait_for_process(marker)
    assert sleeper in working_in(unattended.workspace(first))
    runs = sessions_in(unattended.workspace(first))  # the CLI's, and its Bash tool's own
    assert session_of(sleeper) in runs

    body = {
        "message": text_message("RECALL", contextId=first["contextId"]),
        "configuration": {"blocking": False},
    }
    error = (await call(c, "message/send", body))["error"]
    assert error["code"] == -32602, error
    assert error["data"] == {"contextId": first["contextId"], "taskId": first["id"], "state": "working"}
    assert first["id"] in error["message"] and "one task per context" in error["message"]
    assert sessions_in(unattended.workspace(first)) <= runs, "a second CLI started in the workspace"
    listed = await c.get("/a2a/rest/tasks", params={"contextId": first["contextId"]})
    assert [t["id"] for t in listed.json()["tasks"]] == [first["id"]], "the refused task was stored"

    canceled = await result(c, "tasks/cancel", {"id": first["id"]})
    assert canceled["status"]["state"] == "canceled"
    second = await wait_until_stopped(c, await send_message(c, "RECALL", contextId=first["contextId"]))
    assert second["status"]["state"] == "completed", status_text(second)
    assert response_text(second) == f"The first prompt was: RUN: {marker}"


async def test_cancel_returns_after_the_process_group_is_gone(unattended: Served) -> None:
    marker = f"sleep 300.{uuid.uuid4().int % 10_000_000:07d}"
    task = await send_message(unattended.client, f"RUN: {marker}", blocking=False)
    sleeper = await wait_for_process(marker)
    sid = session_of(sleeper)
    claude = sid
    assert alive(claude) and sleeper in session_members(sid)
    canceled = await result(unattended.client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    # Checked at once: tasks/cancel returned only after the CLI and its tool were gone.
    assert not alive(sleeper) and not alive(claude)
    assert session_members(sid) == []
    assert find_process(marker) is None


async def test_approval_yes_lets_the_tool_run(approvals: Served) -> None:
    c = approvals.client
    task = await send_message(c, "RUN: echo approved > allowed.txt")
    task = await wait_until_stopped(c, task)
    assert task["status"]["state"] == "input-required", status_text(task)
    question = status_text(task)
    assert "Bash" in question and "echo approved > allowed.txt" in question
    assert not (approvals.workspace(task) / "allowed.txt").exists()
    done = await send_message(c, "y", taskId=task["id"], contextId=task["contextId"])
    done = await wait_until_stopped(c, done)
    assert done["status"]["state"] == "completed", status_text(done)
    assert (approvals.workspace(task) / "allowed.txt").read_text().strip() == "approved"
    assert response_text(done).endswith("Done: the tool succeeded.")


async def test_approval_no_denies_the_tool_and_the_task_completes(approvals: Served) -> None:
    c = approvals.client
    task = await wait_until_stopped(c, await send_message(c, "RUN: echo nope > denied.txt"))
    assert task["status"]["state"] == "input-required"
    done = await send_message(c, "n", taskId=task["id"], contextId=task["contextId"])
    done = await wait_until_stopped(c, done)
    assert done["status"]["state"] == "completed", status_text(done)
    assert not (approvals.workspace(task) / "denied.txt").exists()
    assert "Done: the tool failed: The user denied this" in response_text(done)


async def test_approval_decision_as_a_data_part(approvals: Served) -> None:
    c = approvals.client
    task = await wait_until_stopped(c, await send_message(c, "RUN: echo data > data.txt"))
    assert task["status"]["state"] == "input-required"
    answer = text_message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [{"kind": "data", "data": {"decision": "allow"}}]
    done = await result(c, "message/send", {"message": answer})
    done = await wait_until_stopped(c, done)
    assert done["status"]["state"] == "completed"
    assert (approvals.workspace(task) / "data.txt").exists()


async def test_silent_cli_fails_on_the_idle_limit_and_is_stopped(idle_limit: Served) -> None:
    task = await wait_until_stopped(idle_limit.client, await send_message(idle_limit.client, "HANG"))
    assert task["status"]["state"] == "failed"
    assert "printed nothing for 3 s (AGENT_IDLE_TIMEOUT_S)" in status_text(task)
    assert working_in(idle_limit.workspace(task)) == []


async def test_run_past_the_hard_limit_fails_and_is_stopped(hard_limit: Served) -> None:
    c = hard_limit.client
    task = await wait_until_stopped(c, await send_message(c, "DRIP"), within_s=HARD_LIMIT_S + 60)
    assert task["status"]["state"] == "failed"
    assert f"did not finish within {HARD_LIMIT_S} s" in status_text(task)
    assert response_text(task).startswith("..."), "the CLI was printing when the hard limit ended it"
    assert working_in(hard_limit.workspace(task)) == []


async def test_no_process_outlives_a_finished_task(unattended: Served) -> None:
    task = await wait_until_stopped(unattended.client, await send_message(unattended.client, "say hi"))
    assert task["status"]["state"] == "completed"
    assert await wait_none_working_in(unattended.workspace(task)) == []
