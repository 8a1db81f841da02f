"""A CLI run's MCP tool server (`app/agents/cli/tools.py`) through what a CLI uses: the official `mcp` client
starting the stdlib relay (`app/agents/jail/tools_relay.py`) as its stdio server, the relay connecting to the
run's real unix socket. The calls behind it are a recording stand-in: what is under test is the tool server
(its tools, their arguments, a refusal as a tool error, the socket's life), not the calls themselves.
"""

from __future__ import annotations

import asyncio
import json
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from app.agents.calls import AgentInfo, CallError, ChildTask
from app.agents.cli.tools import ToolServer
from app.agents.jail import scratch
from app.protocol.model import Part

MINE = "child-1"


class Recorded:
    """Calls that answer for one child (`MINE`) and refuse every other id, recording what they were asked."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, list[Part], bool]] = []

    async def list_agents(self) -> Sequence[AgentInfo]:
        skill = {"id": "review", "name": "Review", "description": "Reviews a diff.", "tags": ["x"]}
        return [AgentInfo("reviewer", "Reviewer", "Reviews diffs.", (skill,), True)]

    async def send_to_agent(
        self, role: str, text: str, files: Sequence[Part] = (), wait: bool = True
    ) -> ChildTask:
        self.sent.append((role, text, list(files), wait))
        return ChildTask(MINE, "ctx-1", role, "completed", "looks good", usage={"turns": 1})

    async def get_task(self, task_id: str) -> ChildTask:
        if task_id != MINE:
            raise CallError(f"Task {task_id!r} is not a task this run started")
        return ChildTask(MINE, "ctx-1", "reviewer", "input-required", "Which branch?")

    async def answer_task(self, task_id: str, text: str, wait: bool = True) -> ChildTask:
        return ChildTask(task_id, "ctx-1", "reviewer", "completed", f"answered {text}")

    async def cancel_task(self, task_id: str) -> ChildTask:
        return ChildTask(task_id, "ctx-1", "reviewer", "canceled", "")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ToolServer, Recorded]]:
    calls = Recorded()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("+added\n")
    (tmp_path / "secret.txt").write_text("not yours")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    (workspace / "inner").mkdir()
    (workspace / "inner" / "up").symlink_to(tmp_path)
    server = await ToolServer(calls, workspace).start()
    try:
        yield server, calls
    finally:
        await server.aclose()


def client(server: ToolServer) -> Client:
    """The official client, starting the relay as a CLI does (without the jail: the host's paths)."""
    argv = server.relay(jailed=False)
    return Client(StdioServerParameters(command=argv[0], args=argv[1:]), mode="legacy")


def payload(result: Any) -> Any:
    assert len(result.content) == 1
    return json.loads(result.content[0].text)


async def test_tools_are_listed_and_called_through_the_relay(served: tuple[ToolServer, Recorded]) -> None:
    server, calls = served
    async with client(server) as c:
        listed = await c.list_tools()
        names = {t.name for t in listed.tools}
        assert names == {"list_agents", "send_to_agent", "get_task", "answer_task", "cancel_task"}
        send = next(t for t in listed.tools if t.name == "send_to_agent")
        assert send.input_schema["required"] == ["role", "message"]

        agents = await c.call_tool("list_agents", {})
        assert not agents.is_error
        assert payload(agents) == [
            {
                "role": "reviewer",
                "name": "Reviewer",
                "description": "Reviews diffs.",
                "skills": [
                    {"id": "review", "name": "Review", "description": "Reviews a diff.", "tags": ["x"]}
                ],
                "available": True,
            }
        ]

        sent = await c.call_tool(
            "send_to_agent",
            {"role": "reviewer", "message": "review this", "files": ["notes.txt"], "wait": False},
        )
        assert not sent.is_error
        assert payload(sent) == {
            "taskId": MINE,
            "contextId": "ctx-1",
            "role": "reviewer",
            "state": "completed",
            "text": "looks good",
            "usage": {"turns": 1},
            "artifacts": [],
        }
        [(role, text, files, wait)] = calls.sent
        assert (role, text, wait) == ("reviewer", "review this", False)
        assert [(f.filename, f.raw, f.media_type) for f in files] == [
            ("notes.txt", b"+added\n", "text/plain")
        ]

        asked = await c.call_tool("get_task", {"id": MINE})
        assert payload(asked)["state"] == "input-required"
        assert payload(asked)["text"] == "Which branch?"
        answered = await c.call_tool("answer_task", {"id": MINE, "message": "main"})
        assert payload(answered)["text"] == "answered main"
        canceled = await c.call_tool("cancel_task", {"id": MINE})
        assert payload(canceled)["state"] == "canceled"


async def test_a_refusal_and_bad_arguments_are_tool_errors(served: tuple[ToolServer, Recorded]) -> None:
    server, calls = served
    async with client(server) as c:
        refused = await c.call_tool("get_task", {"id": "someone-elses"})
        assert refused.is_error
        assert refused.content[0].text == "Task 'someone-elses' is not a task this run started"

        missing = await c.call_tool("send_to_agent", {"message": "no role"})
        assert missing.is_error and missing.content[0].text == "`role` must be a non-empty string"
        for outside in (
            "../secret.txt",
            "/etc/passwd",
            "nothing-here.txt",
            "link.txt",
            "inner/up/secret.txt",
            "inner",
        ):
            bad = await c.call_tool("send_to_agent", {"role": "reviewer", "message": "m", "files": [outside]})
            assert bad.is_error, outside
            assert outside in bad.content[0].text
        assert calls.sent == []

        with pytest.raises(MCPError) as unknown:
            await c.call_tool("run_shell", {"command": "id"})
        assert unknown.value.error.code == -32602


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return s


async def test_the_socket_is_private_and_gone_after_close(tmp_path: Path) -> None:
    server = await ToolServer(Recorded(), tmp_path).start()
    folder, path = server.folder, server.path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tmp_path not in path.parents
    assert list(folder.iterdir()) == [path], "the jail is shown the socket, not the owner record"
    assert scratch.read_owner(folder.parent) is not None
    async with client(server) as c:
        assert len((await c.list_tools()).tools) == 5
    # A session still open when the run ends: it answers, then the close ends it.
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(json.dumps(INITIALIZE).encode() + b"\n")
    answer = json.loads(await asyncio.wait_for(reader.readline(), 30))
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "a2a"
    await server.aclose()
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()
    assert not path.exists() and not folder.parent.exists()
    with pytest.raises(FileNotFoundError):
        connect(path)


LOADS_OFF_THE_LOOP = """
import asyncio, importlib.abc, sys, threading
from app.agents.cli.run import tool_server

where = []

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "app.agents.cli.tools":
            where.append(threading.current_thread() is threading.main_thread())
        return None

async def main():
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    server = await tool_server()
    ticker.cancel()
    print(server.__name__, where, ticks > 0)

sys.meta_path.insert(0, Watch())
asyncio.run(main())
"""


def test_a_run_loads_the_tool_server_in_a_thread_while_the_event_loop_goes_on() -> None:
    """A fresh process, as a server or worker starts: starting it loads no mcp SDK, and the first run that
    serves tools loads it in a thread (`run.tool_server`) while the loop goes on, as a worker's lease renewals
    must (an import held the loop for over a second on a busy machine)."""
    out = subprocess.run(
        [sys.executable, "-c", LOADS_OFF_THE_LOOP], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ["ToolServer", "[False]", "True"], out
