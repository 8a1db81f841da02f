"""A coding-agent CLI hands work to another role through its run's MCP tools (`app/agents/cli/tools.py`).

A real server process (SQLite) serves two roles: `lead`, the real Claude Code, Codex or Gemini CLI (pinned,
from npm) against a fake of its model API, in the default jail with egress to the fake only; `reviewer`, the
scripted agent. The fake answers the prompt's `CALL: send_to_agent {...}` with a call of the tool the CLI
offers (`mcp__a2a__send_to_agent`, ...), so the CLI starts the relay, which reaches the run's socket, whose
tool starts the reviewer's task as a child of the lead's; the fake's final answer quotes the tool's result.

Then a hostile `ndjson` agent (tests/support/fakes/tools_prober.py) speaks to its run's socket itself: a
task that is not its child, a tool or method that is not one, a line that is not JSON, and the socket of
another run, live on the host, which its jail does not show. That run's socket is gone once it ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support.clis import (
    CLI_BIN,
    FAKES,
    install_clis,
    response_text,
    send_message,
    status_text,
    wait_until_stopped,
)
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.base import FakeServer
from tests.support.fakes.gemini_fake import GeminiFake, gemini_env, write_gemini_home
from tests.support.fakes.openai_fake import API_KEY_ENV, OpenAIFake, write_codex_home
from tests.support.rpc import text_message
from tests.support.server import ServerProcess

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
REVIEWER = {"adapter": "scripted", "card": {"name": "Reviewer", "description": "Reviews a change."}}
V10 = {"A2A-Version": "1.0"}
RUN_S = 180
"""How long a lead's run may take: a CLI's start, two model turns, the reviewer's task."""
ADAPTERS = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}
CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def cli_settings(name: str, fake: FakeServer | FakeAnthropic, tmp: Path) -> dict[str, str]:
    """The server-wide settings the lead's CLI needs: its binary, its model API (the fake, the one host its
    jail may reach), its credentials passed on, a HOME seed with its configuration."""
    settings = {"AGENT_EGRESS_ALLOW": fake.url.removeprefix("http://")}
    if name == "claude":
        cli = {"CLAUDE_BIN": str(CLI_BIN / "claude"), **CLAUDE_ENV, "ANTHROPIC_BASE_URL": fake.url}
    elif name == "codex":
        write_codex_home(tmp / "seed" / ".codex", fake.url)
        cli = {"CODEX_BIN": str(CLI_BIN / "codex"), API_KEY_ENV: "sk-test"}
        settings["AGENT_HOME_SEED"] = str(tmp / "seed")
    else:
        cli = {"GEMINI_BIN": str(CLI_BIN / "gemini"), **gemini_env(fake.url, write_gemini_home(tmp / "seed"))}
        del cli["HOME"]
        settings["AGENT_HOME_SEED"] = str(tmp / "seed")
    passed = [k for k in cli if not k.endswith("_BIN")]
    return {**settings, **cli, "AGENT_ENV_PASSTHROUGH": ",".join(passed)}


class Team:
    def __init__(self, server: ServerProcess, client: httpx.AsyncClient, cli: str) -> None:
        self.server, self.client, self.cli = server, client, cli

    async def rpc(self, role: str, method: str, params: Any, v10: bool = False) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        resp = await self.client.post(f"/agents/{role}/a2a/jsonrpc", json=body, headers=V10 if v10 else {})
        assert resp.status_code == 200, resp.text
        data = resp.json()
        assert "result" in data, data
        return data["result"]

    async def children(self, parent: str, role: str = "reviewer") -> list[dict[str, Any]]:
        """The tasks of `role` whose parent is `parent`, as ListTasks (v1.0) shows them."""
        page = await self.rpc(role, "ListTasks", {"pageSize": 100}, v10=True)
        return [t for t in page["tasks"] if (t.get("metadata") or {}).get("parentTaskId") == parent]


async def _team(tmp: Path, agents: dict[str, Any], cli: str = "", **settings: str) -> AsyncIterator[Team]:
    server = await make_server(
        "sqlite",
        tmp,
        AGENTS=json.dumps(agents),
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        CANCEL_GRACE_S="2",
        **settings,
    )
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=RUN_S) as client:
            yield Team(server, client, cli)
    finally:
        server.stop()


@pytest.fixture(scope="module", params=list(ADAPTERS))
async def team(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[Team]:
    """`lead` (the CLI, the default role: the root endpoints) and `reviewer` (scripted)."""
    install_clis()
    name = request.param
    fake: FakeServer | FakeAnthropic = (
        FakeAnthropic().start() if name == "claude" else OpenAIFake() if name == "codex" else GeminiFake()
    )
    tmp = tmp_path_factory.mktemp(f"calls-{name}")
    agents = {"lead": {"adapter": ADAPTERS[name]}, "reviewer": REVIEWER}
    try:
        async for served in _team(tmp, agents, name, **cli_settings(name, fake, tmp)):
            yield served
    finally:
        fake.stop() if isinstance(fake, FakeAnthropic) else fake.close()


async def test_the_lead_cli_hands_review_to_the_reviewer(team: Team) -> None:
    review = "say:LGTM, ship it;usage:review-model:10:5:0.01"
    call = json.dumps({"role": "reviewer", "message": review})
    lead = await send_message(team.client, f"Have this reviewed.\nCALL: send_to_agent {call}")
    lead = await wait_until_stopped(team.client, lead, within_s=RUN_S)
    assert lead["status"]["state"] == "completed", lead["status"]
    answer = response_text(lead)
    assert "Done: a2a said " in answer and "LGTM, ship it" in answer, answer

    [child] = await team.children(lead["id"])
    assert child["status"]["state"] == "TASK_STATE_COMPLETED"
    assert child["contextId"] != lead["contextId"]
    assert child["metadata"]["callPath"] == ["lead", "reviewer"]
    assert child["id"] in answer  # the tool's result named the child the lead then quoted
    usage = lead["metadata"]["usage"]
    assert usage["childTasks"] == [child["id"]]
    assert usage["children"]["costUsd"] == 0.01


async def test_a_child_that_asks_is_answered_by_the_lead_cli(team: Team) -> None:
    """The reviewer asks; send_to_agent comes back with its question, the lead's CLI answers it with
    answer_task (the fake fills in the child's id from the first result), and both complete."""
    ask = json.dumps({"role": "reviewer", "message": "ask:Which branch?"})
    answer = json.dumps({"id": "{taskId}", "message": "main"})
    prompt = f"Have this reviewed.\nCALL: send_to_agent {ask}\nCALL: answer_task {answer}"
    lead = await send_message(team.client, prompt)
    lead = await wait_until_stopped(team.client, lead, within_s=RUN_S)
    assert lead["status"]["state"] == "completed", lead["status"]
    said = response_text(lead)
    assert "Done: a2a said " in said and "answer:main" in said, said
    [child] = await team.children(lead["id"])
    assert child["status"]["state"] == "TASK_STATE_COMPLETED"
    history = await team.rpc("reviewer", "tasks/get", {"id": child["id"], "historyLength": 10})
    texts = [" ".join(p.get("text", "") for p in m["parts"]) for m in history["history"]]
    assert "ask:Which branch?" in texts and "main" in texts, texts


@pytest.fixture(scope="module", params=list(ADAPTERS))
async def asking(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[Team]:
    """The CLI with AGENT_FORCE=false (Claude's permission prompts, `codex app-server`'s approvals, `gemini
    --acp`): each asks before every tool but the run's own MCP tools."""
    install_clis()
    name = request.param
    fake: FakeServer | FakeAnthropic = (
        FakeAnthropic().start() if name == "claude" else OpenAIFake() if name == "codex" else GeminiFake()
    )
    tmp = tmp_path_factory.mktemp(f"calls-{name}-asking")
    agents = {"lead": {"adapter": ADAPTERS[name]}, "reviewer": REVIEWER}
    try:
        async for served in _team(tmp, agents, name, AGENT_FORCE="false", **cli_settings(name, fake, tmp)):
            yield served
    finally:
        fake.stop() if isinstance(fake, FakeAnthropic) else fake.close()


async def test_the_run_tools_are_called_without_asking_for_permission(asking: Team) -> None:
    call = json.dumps({"role": "reviewer", "message": "say:no questions asked"})
    lead = await send_message(asking.client, f"CALL: send_to_agent {call}")
    lead = await wait_until_stopped(asking.client, lead, within_s=RUN_S)
    assert lead["status"]["state"] == "completed", (lead["status"], status_text(lead))  # never asked
    assert "no questions asked" in response_text(lead)
    assert len(await asking.children(lead["id"])) == 1


# ---- a hostile agent at its tool server --------------------------------------------------------------


@pytest.fixture(scope="module")
async def probed(tmp_path_factory: Any) -> AsyncIterator[Team]:
    tmp = tmp_path_factory.mktemp("calls-prober")
    prober = FAKES / "tools_prober.py"
    agents = {
        "prober": {"adapter": "ndjson", "command": shlex.join([PYTHON, str(prober)])},
        "reviewer": REVIEWER,
    }
    async for served in _team(tmp, agents, AGENT_SANDBOX_READ=str(prober)):
        yield served


def host_socket(context_id: str) -> Path | None:
    """The host's path of the tool socket a live jailed run of `context_id` was given (its bwrap's
    `--ro-bind <host folder> /run/a2a/tools`)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "/run/a2a/tools" in argv and any(context_id in a for a in argv):
            return Path(argv[argv.index("/run/a2a/tools") - 1]) / "tools.sock"
    return None


async def initialize(path: Path) -> dict[str, Any]:
    """An MCP initialize on a tool socket, from the host (not through any jail)."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        writer.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode())
        writer.write(b"\n")
        return json.loads(await asyncio.wait_for(reader.readline(), 30))
    finally:
        writer.close()


async def test_a_hostile_agent_gets_nothing_but_its_own_tools(probed: Team) -> None:
    c = probed.client
    # A task of the same principal on the reviewer that no run started: not a child of the prober's.
    foreign = await probed.rpc("reviewer", "message/send", {"message": text_message("say:mine")})
    held = await send_message(c, json.dumps({"hold": True}), blocking=False)
    held = await wait_until_stopped(c, held, within_s=RUN_S)
    assert held["status"]["state"] == "input-required", held["status"]
    earlier = host_socket(held["contextId"])
    assert earlier is not None and earlier.is_socket()
    assert (await initialize(earlier))["result"]["serverInfo"]["name"] == "a2a"  # live, from the host

    task = await send_message(c, json.dumps({"foreign": foreign["id"], "other": str(earlier)}))
    task = await wait_until_stopped(c, task, within_s=RUN_S)
    assert task["status"]["state"] == "completed", task["status"]
    report = json.loads(response_text(task))
    assert report["tools argv"][-2:] == ["/run/a2a/tools_relay.py", "/run/a2a/tools/tools.sock"]
    # Egress is on (the default in the jail): its relay and socket are beside the tools'.
    assert report["seen in /run/a2a"] == ["bridge.py", "egress.sock", "tools", "tools_relay.py"]
    assert report["seen in /run/a2a/tools"] == ["tools.sock"]
    own = report["own"]
    assert own["initialize"] == "a2a"
    assert own["tools"] == ["answer_task", "cancel_task", "get_task", "list_agents", "send_to_agent"]
    for tool in ("get_task", "answer_task", "cancel_task"):
        assert own[tool]["isError"] is True, own
        assert "not a task this run started" in own[tool]["text"], own
    assert own["run_shell"] == {"error": -32602, "message": "Unknown tool: run_shell"}
    for method in ("tasks/get", "resources/list", "prompts/list"):
        assert own[method]["error"] == -32601, own
    assert own["not json"] == {"error": -32700, "message": "Parse error: not JSON"}
    assert report["other"].startswith("refused: FileNotFoundError"), report  # not in its jail

    mine = await probed.rpc("reviewer", "tasks/get", {"id": foreign["id"]})
    assert mine["status"]["state"] == "completed"  # the cancel reached nothing

    held = await send_message(c, "y", taskId=held["id"], contextId=held["contextId"])
    held = await wait_until_stopped(c, held, within_s=RUN_S)
    assert held["status"]["state"] == "completed", held["status"]
    async with asyncio.timeout(30):
        while earlier.exists():
            await asyncio.sleep(0.05)
    assert not earlier.parent.exists()
    with pytest.raises(FileNotFoundError):
        await initialize(earlier)
