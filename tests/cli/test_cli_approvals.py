"""Approvals with choices (docs/agents.md#approvals), the real Claude Code CLI against the fake Anthropic API.

One server (SQLite) with two Claude Code roles: `gated` sets no `force`, so it takes the server's
AGENT_FORCE=false and asks before tools run; `trusted` sets `force: true` and asks nothing. The fake model
asks for `Bash` twice in a row (`RUNS:`) or twice at once (`PARALLEL:`), and the input-required carries the
approval data part that every answer below names a call of.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import struct_pb2

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from tests.cli.test_cli_claude import CLAUDE_ENV
from tests.conftest import make_server
from tests.support.clis import (
    CLI_BIN,
    get_task,
    response_text,
    send_message,
    status_text,
    wait_until_stopped,
)
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.rpc import call, result, text_message
from tests.support.server import ServerProcess, free_port


class Served:
    def __init__(
        self, server: ServerProcess, gated: httpx.AsyncClient, trusted: httpx.AsyncClient, root: Path
    ):
        self.server, self.gated, self.trusted, self.root = server, gated, trusted, root

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]


@pytest.fixture(scope="module")
async def served(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("claude-approvals-roles")
    claude = {"adapter": "claude-code", "bin": str(CLI_BIN / "claude")}
    settings = {
        "AGENTS": json.dumps({"gated": claude, "trusted": {**claude, "force": True}}),
        "AGENT_FORCE": "false",
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        **CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": fake_api.url,
        "AGENT_ENV_PASSTHROUGH": ",".join(CLAUDE_ENV),
        "AGENT_EGRESS_ALLOW": fake_api.url.removeprefix("http://"),
        "CANCEL_GRACE_S": "2",
        "GRPC_PORT": str(grpc_port := free_port()),
    }
    server = await make_server("sqlite", tmp, **settings)
    server.grpc_port = grpc_port  # type: ignore[attr-defined]
    try:
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=60) as gated,
            httpx.AsyncClient(base_url=server.base_url + "/agents/trusted", timeout=60) as trusted,
        ):
            yield Served(server, gated, trusted, tmp)
    finally:
        server.stop()


def approval(task: dict) -> dict:
    """The approval data part of the task's question."""
    parts = (task["status"].get("message") or {}).get("parts", [])
    found = [p["data"] for p in parts if p.get("kind") == "data" and p["data"].get("kind") == "approval"]
    assert len(found) == 1, task["status"]
    return found[0]


def commands(task: dict) -> list[str]:
    return [c["input"]["command"] for c in approval(task)["calls"]]


async def decide(client: httpx.AsyncClient, task: dict, call_id: str, option: str) -> dict:
    answer = text_message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [{"kind": "data", "data": {"kind": "approval", "callId": call_id, "option": option}}]
    return await wait_until_stopped(client, await result(client, "message/send", {"message": answer}))


async def asked(client: httpx.AsyncClient, text: str, **fields: Any) -> dict:
    task = await wait_until_stopped(client, await send_message(client, text, **fields))
    assert task["status"]["state"] == "input-required", status_text(task)
    return task


def input_required_count(task: dict) -> int:
    """How many questions the task asked: its agent messages that carry an approval data part."""
    return sum(
        1
        for m in task.get("history", [])
        if m["role"] == "agent" and any(p.get("data", {}).get("kind") == "approval" for p in m["parts"])
    )


async def test_the_question_carries_the_call_and_the_options(served: Served) -> None:
    task = await asked(served.gated, "RUN: echo shown > shown.txt")
    data = approval(task)
    assert data["options"] == ["allow_once", "allow_always", "deny"]
    (only,) = data["calls"]
    assert only["name"] == "Bash" and only["input"]["command"] == "echo shown > shown.txt"
    assert only["id"].startswith("toolu_") and only["always"]["tool"] == "Bash"
    assert "Bash" in status_text(task)  # the text question is still there, for text-only clients
    done = await decide(served.gated, task, only["id"], "allow_once")
    assert done["status"]["state"] == "completed", status_text(done)
    assert (served.workspace(task) / "shown.txt").read_text() == "shown\n"


async def test_allow_always_on_the_first_bash_means_no_second_question(served: Served) -> None:
    c = served.gated
    task = await asked(c, "RUNS: git init -q one | git init -q two")
    assert commands(task) == ["git init -q one"]
    (first,) = approval(task)["calls"]
    assert first["always"] == {"tool": "Bash", "pattern": "git init *"}
    done = await decide(c, task, first["id"], "allow_always")
    assert done["status"]["state"] == "completed", status_text(done)
    assert (served.workspace(task) / "one" / ".git").is_dir() and (
        served.workspace(task) / "two" / ".git"
    ).is_dir()
    assert input_required_count(await result(c, "tasks/get", {"id": task["id"]})) == 1
    # The rule holds for the rest of the context's session: the next task of the context (a new CLI process)
    # asks nothing for the same pattern, and still asks for another command, or the pattern followed by a
    # second command.
    again = await send_message(c, "RUN: git init -q three", contextId=task["contextId"])
    again = await wait_until_stopped(c, again)
    assert again["status"]["state"] == "completed", status_text(again)
    assert (served.workspace(task) / "three" / ".git").is_dir()
    for other in ("touch other.txt", "git init -q four && touch other.txt"):
        asking = await asked(c, f"RUN: {other}", contextId=task["contextId"])
        assert commands(asking) == [other]
        await decide(c, asking, approval(asking)["calls"][0]["id"], "deny")
    assert not (served.workspace(task) / "other.txt").exists()


async def test_deny_on_one_of_two_open_calls_leaves_the_other_open(served: Served) -> None:
    c = served.gated
    task = await asked(c, "PARALLEL: ls /usr | ls /bin")
    assert commands(task) == ["ls /usr", "ls /bin"]
    first, second = approval(task)["calls"]
    task = await decide(c, task, first["id"], "deny")
    assert task["status"]["state"] == "input-required", status_text(task)
    assert [call["id"] for call in approval(task)["calls"]] == [second["id"]]
    done = await decide(c, task, second["id"], "allow_once")
    assert done["status"]["state"] == "completed", status_text(done)
    assert response_text(done).endswith("Done: 1 ran, 1 failed.")
    stored = await get_task(c, task["id"])  # as the store folded it at the end, not the send's answer
    assert response_text(stored) == response_text(done)


async def test_y_still_decides_every_open_call(served: Served) -> None:
    c = served.gated
    task = await asked(c, "PARALLEL: ls /usr | ls /bin")
    assert len(approval(task)["calls"]) == 2
    assert status_text(task).startswith("2 tool calls wait for approval")
    done = await wait_until_stopped(
        c, await send_message(c, "y", taskId=task["id"], contextId=task["contextId"])
    )
    assert done["status"]["state"] == "completed", status_text(done)
    assert response_text(done).endswith("Done: 2 ran, 0 failed.")


async def test_an_edit_asks_with_the_diff_it_would_make(served: Served) -> None:
    c = served.gated
    task = await asked(c, "WRITE: notes.txt | hello there")
    (write,) = approval(task)["calls"]
    assert write["name"] == "Write" and "+hello there" in write["diff"], write
    done = await decide(c, task, write["id"], "allow_once")
    assert done["status"]["state"] == "completed", status_text(done)
    assert (served.workspace(task) / "notes.txt").read_text() == "hello there\n"


async def test_a_role_with_force_asks_nothing_while_the_other_asks(served: Served) -> None:
    done = await wait_until_stopped(
        served.trusted, await send_message(served.trusted, "RUN: echo free > f.txt")
    )
    assert done["status"]["state"] == "completed", status_text(done)
    assert (served.workspace(done) / "f.txt").read_text() == "free\n"
    task = await asked(served.gated, "RUN: echo gated > g.txt")
    assert not (served.workspace(task) / "g.txt").exists()
    await decide(served.gated, task, approval(task)["calls"][0]["id"], "deny")


async def test_a_task_may_ask_a_stricter_mode_never_a_looser_one(served: Served) -> None:
    stricter = await asked(served.trusted, "RUN: echo strict > s.txt", metadata={"force": False})
    assert commands(stricter) == ["echo strict > s.txt"]
    await decide(served.trusted, stricter, approval(stricter)["calls"][0]["id"], "deny")
    looser = await call(
        served.gated, "message/send", {"message": text_message("hi", metadata={"force": True})}
    )
    assert looser["error"]["code"] == -32602, looser
    assert "stricter" in looser["error"]["message"] and "force=false" in looser["error"]["message"]


async def test_a_malformed_approval_answer_is_refused(served: Served) -> None:
    task = await asked(served.gated, "RUN: echo later > later.txt")
    answer = text_message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [{"kind": "data", "data": {"kind": "approval", "callId": "x", "option": "sometimes"}}]
    refused = await call(served.gated, "message/send", {"message": answer})
    assert refused["error"]["code"] == -32602 and "allow_once" in refused["error"]["message"], refused
    assert (await result(served.gated, "tasks/get", {"id": task["id"]}))["status"][
        "state"
    ] == "input-required"
    await decide(served.gated, task, approval(task)["calls"][0]["id"], "deny")


LOOSER = {"force": True}


def _http_send(binding: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """Path, body and headers of a send to the gated role asking for a looser mode, on `binding`."""
    mid = str(uuid.uuid4())
    if binding == "jsonrpc-0.3":
        message = {
            "kind": "message",
            "messageId": mid,
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": {**message, "metadata": LOOSER}},
        }
        return "/a2a/jsonrpc", body, {}
    v10 = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}], "metadata": LOOSER}
    if binding == "jsonrpc-1.0":
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": v10}}
        return "/a2a/jsonrpc", body, {"A2A-Version": "1.0"}
    if binding == "rest-0.3":
        v03 = {"messageId": mid, "role": "ROLE_USER", "content": [{"text": "hi"}], "metadata": LOOSER}
        return "/a2a/rest/v1/message:send", {"message": v03}, {}
    return "/a2a/rest/message:send", {"message": v10}, {"A2A-Version": "1.0"}


@pytest.mark.parametrize("binding", ["jsonrpc-0.3", "jsonrpc-1.0", "rest-0.3", "rest-1.0"])
async def test_a_looser_mode_is_refused_on_every_http_binding(served: Served, binding: str) -> None:
    path, body, headers = _http_send(binding)
    resp = await served.gated.post(path, json=body, headers=headers)
    if binding.startswith("jsonrpc"):
        assert resp.status_code == 200 and resp.json()["error"]["code"] == -32602, resp.text
    elif binding == "rest-0.3":
        assert resp.status_code == 422 and resp.json()["code"] == -32602, resp.text
    else:
        assert resp.status_code == 400 and resp.json()["error"]["status"] == "INVALID_ARGUMENT", resp.text
    assert "stricter" in resp.text, resp.text


@pytest.mark.parametrize("version", ["0.3", "1.0"])
async def test_a_looser_mode_is_refused_over_grpc(served: Served, version: str) -> None:
    metadata = struct_pb2.Struct()
    metadata.update(LOOSER)
    mid = str(uuid.uuid4())
    if version == "1.0":
        parts = [a2a_pb2.Part(text="hi")]
        message = a2a_pb2.Message(message_id=mid, role=a2a_pb2.ROLE_USER, parts=parts, metadata=metadata)
        request: Any = a2a_pb2.SendMessageRequest(message=message)
    else:
        content = [a2a_v0_3_pb2.Part(text="hi")]
        old = a2a_v0_3_pb2.Message(
            message_id=mid, role=a2a_v0_3_pb2.ROLE_USER, content=content, metadata=metadata
        )
        request = a2a_v0_3_pb2.SendMessageRequest(request=old)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{served.server.grpc_port}") as channel:  # type: ignore[attr-defined]
        stub = (a2a_pb2_grpc.A2AServiceStub if version == "1.0" else a2a_v0_3_pb2_grpc.A2AServiceStub)(
            channel
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SendMessage(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "stricter" in str(caught.value.details())
