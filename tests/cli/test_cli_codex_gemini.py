"""The real Codex (0.169.0) and Gemini CLI (0.61.0), pinned from npm, as the task's agent.

Everything goes through the A2A API of a real server process (SQLite) with AGENT_ADAPTER=codex or gemini:
the CLI runs for real in the task's workspace and calls a fake of its model API on 127.0.0.1
(tests/support/fakes), whose answer the prompt chooses (`FAKE:tool:<file>`, `FAKE:long:<n>`, `FAKE:hang`,
...).
Per CLI, one server runs unattended (AGENT_FORCE=true: `codex exec`, `gemini -p --approval-mode yolo`),
one with approvals on (`codex app-server`, `gemini --acp`) and two unattended, one with a short idle limit
and one with a short hard limit, each in the default jail with egress to its fake only and a HOME seeded
with the CLI's configuration. Tests sharing a server are isolated by their context: each task gets its own
workspace and CLI session, as in production, where every task of a principal shares the principal's HOME.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
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
    install_clis,
    response_text,
    send_message,
    status_text,
    wait_for_process,
    wait_none_working_in,
    wait_until_stopped,
    working_in,
)
from tests.support.fakes.base import ERROR_MESSAGE, TEXT, TEXT_CHUNKS, FakeServer
from tests.support.fakes.gemini_fake import GeminiFake, gemini_env, write_gemini_home
from tests.support.fakes.openai_fake import API_KEY_ENV, OpenAIFake, write_codex_home
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess

REFUSAL = {"codex": "rejected by user", "gemini": "was canceled by the user"}
"""What each CLI tells the model when the user denies the tool (the fake echoes the tool output)."""
EDIT_QUESTION = {"codex": "Allow file_change ", "gemini": "Allow edit "}
"""How the question about a file edit starts (a shell command's names `shell` / `execute`)."""
IDLE_LIMIT_S = 20
"""AGENT_IDLE_TIMEOUT_S of the idle-limit server (its hard limit the default). The idle limit counts from the
CLI's start, and a CLI prints nothing while it starts (Gemini 2 s, much more on a busy machine): it must not
fire before the CLI has sent its request to the model, which the idle test checks it was waiting for."""
HARD_LIMIT_S = 20
"""AGENT_TIMEOUT_S of the hard-limit server, whose idle limit never fires (start-up silence and the pauses
of the command loop count for nothing there): the loop must have run a command before it ends the run."""
LOST_SESSION = {
    "codex": ("codex exited with status 1: ", "no rollout found for thread id {}"),
    "gemini": ("gemini exited with status 42: ", "Error resuming session: No previous sessions found"),
}
"""How each CLI exits when the session a turn resumes is gone, and what it says on stderr."""


@dataclass
class Cli:
    name: str
    fake: FakeServer

    def env(self, tmp: Path) -> dict[str, str]:
        """The server's settings: the CLI's binary, a HOME seed with its configuration, the fake's URL and
        key passed on to the CLI, and the fake as the one host the jail lets it reach."""
        jail = {
            "AGENT_HOME_SEED": str(tmp / "seed"),
            "AGENT_EGRESS_ALLOW": self.fake.url.removeprefix("http://"),
        }
        if self.name == "codex":
            write_codex_home(tmp / "seed" / ".codex", self.fake.url)
            cli = {"CODEX_BIN": str(CLI_BIN / "codex"), API_KEY_ENV: "sk-test"}
        else:
            cli = {
                "GEMINI_BIN": str(CLI_BIN / "gemini"),
                **gemini_env(self.fake.url, write_gemini_home(tmp / "seed")),
            }
            del cli["HOME"]
        passed = [k for k in cli if not k.endswith("_BIN")]
        return {**cli, **jail, "AGENT_ENV_PASSTHROUGH": ",".join(passed)}


@dataclass
class Served:
    cli: Cli
    server: ServerProcess
    client: httpx.AsyncClient
    root: Path

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]

    def stored_session(self, session_id: str) -> list[Path]:
        """The files in which the CLI keeps the session (Codex's rollouts, Gemini's chats) in the HOME of
        the (anonymous) principal."""
        home = self.root / "ws" / principal_key(ANONYMOUS) / ".home"
        store = home / ".codex" / "sessions" if self.cli.name == "codex" else home / ".gemini"
        return [f for f in store.rglob("*.jsonl") if session_id in f.read_text(errors="replace")]


@pytest.fixture(scope="module", params=["codex", "gemini"])
def cli(request: pytest.FixtureRequest) -> Any:
    install_clis()
    fake = OpenAIFake() if request.param == "codex" else GeminiFake()
    yield Cli(request.param, fake)
    fake.close()


async def _serve(cli: Cli, tmp: Path, **env: str) -> AsyncIterator[Served]:
    settings = {
        "AGENT_ADAPTER": cli.name,
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        "CANCEL_GRACE_S": "2",
        **cli.env(tmp),
        **env,
    }
    server = await make_server("sqlite", tmp, **settings)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield Served(cli, server, client, tmp)
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def unattended(cli: Cli, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async for served in _serve(cli, tmp_path_factory.mktemp(f"{cli.name}-unattended")):
        yield served


@pytest.fixture(scope="module")
async def approvals(cli: Cli, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async for served in _serve(cli, tmp_path_factory.mktemp(f"{cli.name}-approvals"), AGENT_FORCE="false"):
        yield served


@pytest.fixture(scope="module")
async def idle_limit(cli: Cli, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """Unattended, with a short idle limit (`IDLE_LIMIT_S`) and the default hard one."""
    tmp = tmp_path_factory.mktemp(f"{cli.name}-idle-limit")
    limits = {"AGENT_IDLE_TIMEOUT_S": str(IDLE_LIMIT_S), "CANCEL_GRACE_S": "1"}
    async for served in _serve(cli, tmp, **limits):
        yield served


@pytest.fixture(scope="module")
async def hard_limit(cli: Cli, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """Unattended, with a short hard limit (`HARD_LIMIT_S`) and an idle limit that never fires first, so
    neither limit races the other."""
    tmp = tmp_path_factory.mktemp(f"{cli.name}-hard-limit")
    limits = {"AGENT_IDLE_TIMEOUT_S": "600", "AGENT_TIMEOUT_S": str(HARD_LIMIT_S), "CANCEL_GRACE_S": "1"}
    async for served in _serve(cli, tmp, **limits):
        yield served


def _unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:8]}"


async def _stream(client: httpx.AsyncClient, text: str) -> list[dict]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": text_message(text)}}
    events: list[dict] = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
        async for sse in src.aiter_sse():
            if sse.data:
                events.append(json.loads(sse.data)["result"])
    return events


def _response_chunks(events: list[dict]) -> list[dict]:
    artifacts = [e for e in events if e["kind"] == "artifact-update"]
    rid = next(
        e["artifact"]["artifactId"] for e in artifacts if e["artifact"].get("name") == "assistant-response"
    )
    return [e for e in artifacts if e["artifact"]["artifactId"] == rid]


def _session_id(task: dict) -> str:
    return task["metadata"]["session"]["sessionId"]


def _long_command() -> tuple[str, str]:
    """A prompt for a tool that sleeps 300 s, and the marker its process's command line carries."""
    n = f"{uuid.uuid4().int % 10_000_000:07d}"
    return f"FAKE:long:{n}", f"sleep 300.{n}"


async def _cancel_and_check_nothing_survives(served: Served, task: dict, marker: str) -> None:
    sleeper = await wait_for_process(marker, within_s=60)
    cli_processes = [pid for pid in working_in(served.workspace(task)) if pid != sleeper]
    assert cli_processes, "the CLI runs in the task's workspace"
    canceled = await result(served.client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    # Checked at once: tasks/cancel returned only after the CLI and its tool were gone.
    assert [pid for pid in [sleeper, *cli_processes] if alive(pid)] == []
    survivor = find_process(marker)
    assert survivor is None, _describe(survivor)
    assert working_in(served.workspace(task)) == []


def _describe(pid: int | None) -> str:
    """A surviving process, for the failure message: its stat line and command line."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"process {pid} (gone by now)"
    return f"process {pid} survived: {stat.strip()[:120]} | {cmd[:200]}"


# ---- unattended (AGENT_FORCE=true) -------------------------------------------------------------------


async def test_text_task_streams_the_answer_and_the_next_turn_resumes_the_session(unattended: Served) -> None:
    c = unattended.client
    card = (await c.get("/.well-known/agent-card.json")).json()
    assert card["name"] == f"coding-agent-a2a ({unattended.cli.name})"
    first_prompt = _unique("say hi")
    events = await _stream(c, first_prompt)
    assert events[-1]["kind"] == "status-update" and events[-1]["status"]["state"] == "completed"
    chunks = _response_chunks(events)
    texts = [p["text"] for c in chunks for p in c["artifact"]["parts"]]
    assert "".join(texts) == TEXT
    # codex exec prints whole messages only; gemini's stream-json prints each delta of the model.
    expected = 1 if unattended.cli.name == "codex" else len(TEXT_CHUNKS)
    assert len([t for t in texts if t]) == expected
    assert [c["append"] for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert chunks[-1]["lastChunk"] is True
    first = await get_task(c, events[0]["id"])
    summary = next(a for a in first["artifacts"] if a.get("name") == "result")["parts"][0]["data"]
    assert summary["summary"] == TEXT
    assert summary["stats"], "the CLI's usage is in the result"

    second_prompt = _unique("again")
    second = await wait_until_stopped(c, await send_message(c, second_prompt, contextId=first["contextId"]))
    assert second["status"]["state"] == "completed", status_text(second)
    assert _session_id(second) == _session_id(first)
    sent = [
        json.dumps(body) for _, _, body in unattended.cli.fake.requests if second_prompt in json.dumps(body)
    ]
    assert sent and first_prompt in sent[-1], "the model got the first turn as history"


async def test_tool_runs_and_its_file_appears_in_the_workspace(unattended: Served) -> None:
    name = _unique("marker") + ".txt"
    task = await wait_until_stopped(
        unattended.client, await send_message(unattended.client, f"FAKE:tool:{name}")
    )
    assert task["status"]["state"] == "completed", status_text(task)
    assert (unattended.workspace(task) / name).read_text().strip() == "hi"
    assert response_text(task).startswith("Done: tool said")
    assert await wait_none_working_in(unattended.workspace(task)) == []


async def test_model_api_error_fails_the_task_with_the_reason(unattended: Served) -> None:
    """Both CLIs exit non-zero here too, but only after reporting the error in their stream
    (`turn.failed`, a `result` with status error), which is what the reason comes from."""
    task = await wait_until_stopped(unattended.client, await send_message(unattended.client, "FAKE:error"))
    assert task["status"]["state"] == "failed"
    assert ERROR_MESSAGE in status_text(task)


async def test_cli_exiting_non_zero_fails_the_task_with_its_stderr(unattended: Served) -> None:
    """The next turn resumes a session the CLI no longer has (its home lost it): the CLI prints no
    event, exits non-zero and says why on stderr, and the task fails with both."""
    c = unattended.client
    first = await wait_until_stopped(c, await send_message(c, _unique("say hi")))
    assert first["status"]["state"] == "completed", status_text(first)
    session = _session_id(first)
    stored = unattended.stored_session(session)
    assert stored, "the CLI stored the session"
    for path in stored:
        path.unlink()
    second = await wait_until_stopped(
        c, await send_message(c, _unique("again"), contextId=first["contextId"])
    )
    assert second["status"]["state"] == "failed"
    status, stderr = LOST_SESSION[unattended.cli.name]
    reason = status_text(second)
    assert status in reason and stderr.format(session) in reason, reason
    assert await wait_none_working_in(unattended.workspace(second)) == []


async def test_cancel_returns_after_the_process_group_is_gone(unattended: Served) -> None:
    prompt, marker = _long_command()
    task = await send_message(unattended.client, prompt, blocking=False)
    await _cancel_and_check_nothing_survives(unattended, task, marker)


# ---- approvals on (AGENT_FORCE=false) ----------------------------------------------------------------


async def test_approval_yes_lets_the_tool_run(approvals: Served) -> None:
    c = approvals.client
    name = _unique("allowed") + ".txt"
    task = await wait_until_stopped(c, await send_message(c, f"FAKE:tool:{name}"))
    assert task["status"]["state"] == "input-required", status_text(task)
    assert f"echo hi > {name}" in status_text(task)
    assert not (approvals.workspace(task) / name).exists()
    done = await send_message(c, "y", taskId=task["id"], contextId=task["contextId"])
    done = await wait_until_stopped(c, done)
    assert done["status"]["state"] == "completed", status_text(done)
    assert (approvals.workspace(task) / name).read_text().strip() == "hi"
    assert response_text(done).startswith("Done: tool said")
    assert await wait_none_working_in(approvals.workspace(task)) == []


async def test_approval_no_denies_the_tool_and_the_task_completes(approvals: Served) -> None:
    c = approvals.client
    name = _unique("denied") + ".txt"
    task = await wait_until_stopped(c, await send_message(c, f"FAKE:tool:{name}"))
    assert task["status"]["state"] == "input-required", status_text(task)
    done = await send_message(c, "n", taskId=task["id"], contextId=task["contextId"])
    done = await wait_until_stopped(c, done)
    assert done["status"]["state"] == "completed", status_text(done)
    assert not (approvals.workspace(task) / name).exists()
    assert REFUSAL[approvals.cli.name] in response_text(done)


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_approval_decision_as_a_data_part(approvals: Served, decision: str) -> None:
    c = approvals.client
    name = _unique(decision) + ".txt"
    task = await wait_until_stopped(c, await send_message(c, f"FAKE:tool:{name}"))
    assert task["status"]["state"] == "input-required", status_text(task)
    answer = text_message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [{"kind": "data", "data": {"decision": decision}}]
    done = await wait_until_stopped(c, await result(c, "message/send", {"message": answer}))
    assert done["status"]["state"] == "completed", status_text(done)
    assert (approvals.workspace(task) / name).exists() is (decision == "allow")
    assert (REFUSAL[approvals.cli.name] in response_text(done)) is (decision == "deny")


async def test_allow_always_as_a_data_part_asks_no_second_time(approvals: Served) -> None:
    """The approval data part names the call; `allow_always` on the first of two runs of a command lets
    the second run without a question, and holds for the next task of the context, in a new CLI process
    (its rule is kept beside the session)."""
    c = approvals.client
    name = _unique("always") + ".txt"
    task = await wait_until_stopped(c, await send_message(c, f"FAKE:twice:{name}"))
    assert task["status"]["state"] == "input-required", status_text(task)
    (data,) = [p["data"] for p in task["status"]["message"]["parts"] if p.get("kind") == "data"]
    assert data["kind"] == "approval" and data["options"] == ["allow_once", "allow_always", "deny"]
    (asked,) = data["calls"]
    answer = text_message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [
        {"kind": "data", "data": {"kind": "approval", "callId": asked["id"], "option": "allow_always"}}
    ]
    done = await wait_until_stopped(c, await result(c, "message/send", {"message": answer}))
    assert done["status"]["state"] == "completed", status_text(done)
    assert (approvals.workspace(task) / name).read_text() == "hi\nhi\n"
    history = (await result(c, "tasks/get", {"id": task["id"]}))["history"]
    questions = [
        m for m in history if m["role"] == "agent" and any(p.get("kind") == "data" for p in m["parts"])
    ]
    assert len(questions) == 1, questions
    again = await send_message(c, f"FAKE:twice:{name}", contextId=task["contextId"])
    again = await wait_until_stopped(c, again)
    assert again["status"]["state"] == "completed", (status_text(again), asked["always"])
    written = (approvals.workspace(task) / name).read_text()
    if written != "hi\n" * 4:
        stored = await result(c, "tasks/get", {"id": again["id"]})
        said = [" ".join(p.get("text", "") for p in m["parts"]) for m in stored.get("history", [])]
        pytest.fail(f"{written!r} after the second task; it said {said}, answered {response_text(stored)!r}")


async def test_file_edit_asks_first_and_y_writes_the_file(approvals: Served) -> None:
    """Not a shell command: Codex's apply_patch is a file change (`item/fileChange/requestApproval`),
    Gemini's write_file an edit permission."""
    c = approvals.client
    name = _unique("patched") + ".txt"
    task = await wait_until_stopped(c, await send_message(c, f"FAKE:patch:{name}"))
    assert task["status"]["state"] == "input-required", status_text(task)
    question = status_text(task)
    assert question.startswith(EDIT_QUESTION[approvals.cli.name]) and name in question, question
    assert not (approvals.workspace(task) / name).exists()
    done = await wait_until_stopped(
        c, await send_message(c, "y", taskId=task["id"], contextId=task["contextId"])
    )
    assert done["status"]["state"] == "completed", status_text(done)
    assert (approvals.workspace(task) / name).read_text() == "patched\n"


async def test_cancel_of_an_approved_long_tool_leaves_no_process(approvals: Served) -> None:
    c = approvals.client
    prompt, marker = _long_command()
    task = await wait_until_stopped(c, await send_message(c, prompt))
    assert task["status"]["state"] == "input-required", status_text(task)
    assert find_process(marker) is None, "nothing runs before the user allows it"
    await send_message(c, "y", blocking=False, taskId=task["id"], contextId=task["contextId"])
    await _cancel_and_check_nothing_survives(approvals, task, marker)


async def test_approvals_on_next_turn_in_the_context(approvals: Served) -> None:
    """Codex resumes its thread (`thread/resume`); Gemini 0.61.0 cannot load an ACP session, so a new one
    starts in the same workspace (if an upgrade fixes that, this test says so)."""
    c = approvals.client
    first_prompt = _unique("remember")
    first = await wait_until_stopped(c, await send_message(c, first_prompt))
    assert first["status"]["state"] == "completed", status_text(first)
    second_prompt = _unique("again")
    second = await wait_until_stopped(c, await send_message(c, second_prompt, contextId=first["contextId"]))
    assert second["status"]["state"] == "completed", status_text(second)
    sent = [
        json.dumps(body) for _, _, body in approvals.cli.fake.requests if second_prompt in json.dumps(body)
    ]
    resumed = approvals.cli.name == "codex"
    assert (_session_id(second) == _session_id(first)) is resumed
    assert sent and (first_prompt in sent[-1]) is resumed


# ---- limits (AGENT_IDLE_TIMEOUT_S, AGENT_TIMEOUT_S) --------------------------------------------------


async def test_silent_cli_fails_on_the_idle_limit_and_is_stopped(idle_limit: Served) -> None:
    """The model API accepts the request and sends nothing, so the CLI, waiting for it, prints nothing."""
    c = idle_limit.client
    prompt = f"FAKE:hang {_unique('silence')}"
    task = await wait_until_stopped(c, await send_message(c, prompt), within_s=IDLE_LIMIT_S + 60)
    assert task["status"]["state"] == "failed"
    name = idle_limit.cli.name
    assert f"{name} printed nothing for {IDLE_LIMIT_S} s (AGENT_IDLE_TIMEOUT_S)" in status_text(task)
    assert any(prompt in json.dumps(body) for _, _, body in idle_limit.cli.fake.requests), (
        "the CLI was waiting"
    )
    # Checked at once: the task failed only after the CLI was stopped.
    assert working_in(idle_limit.workspace(task)) == []


async def test_run_past_the_hard_limit_fails_and_is_stopped(hard_limit: Served) -> None:
    """The model asks for one short command after another, so the CLI keeps working; the hard limit ends
    the run."""
    c = hard_limit.client
    marker = _unique("loop")
    task = await wait_until_stopped(
        c, await send_message(c, f"FAKE:loop:{marker}"), within_s=HARD_LIMIT_S + 60
    )
    assert task["status"]["state"] == "failed"
    assert f"did not finish within {HARD_LIMIT_S} s" in status_text(task)
    calls = [json.dumps(body) for _, _, body in hard_limit.cli.fake.requests if marker in json.dumps(body)]
    assert any(f"{marker}-1" in body for body in calls), "the CLI ran a command and went on"
    assert working_in(hard_limit.workspace(task)) == []
    assert find_process(marker) is None, _describe(find_process(marker))
