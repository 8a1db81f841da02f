"""The README's example agent (`examples/release_notes.py`), served by a real server, end to end."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
async def example(tmp_path_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    srv: ServerProcess = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("example"),
        AGENT_ADAPTER="examples.release_notes:ReleaseNotesAgent",
        AGENT_OPTIONS='{"delay_s": 0}',
    )
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
        yield c
    srv.stop()


async def test_greeting_is_a_direct_reply(example):
    reply = await result(example, "message/send", {"message": text_message("hello")})
    assert reply["kind"] == "message" and "commit subjects" in reply["parts"][0]["text"]


async def test_direct_reply_under_an_idempotency_key_is_kept(example):
    """The agent's direct reply is what a retry under the key gets back (its own messageId shows it is
    the stored reply, not a second one); the key with another message is refused."""
    key = {"Idempotency-Key": str(uuid.uuid4())}
    msg = text_message("hello")

    async def send(message: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        return (await example.post("/a2a/jsonrpc", json=body, headers=key)).json()

    first = (await send(msg))["result"]
    assert first["kind"] == "message"
    assert (await send(msg))["result"] == first
    assert (await result(example, "message/send", {"message": msg}))["messageId"] != first["messageId"]
    assert (await send(text_message("hi")))["error"]["code"] == -32602


async def test_notes_stream_then_ask_then_file_and_data(example):
    changes = "feat: dark mode\nfix: crash on empty input\nfeat: export to CSV"
    task = await result(example, "message/send", {"message": text_message(changes)})
    assert task["status"]["state"] == "input-required"
    assert "Which version" in task["status"]["message"]["parts"][0]["text"]
    draft = next(a for a in task["artifacts"] if a["name"] == "assistant-response")
    assert "### Features\n- dark mode\n- export to CSV\n" in "".join(p["text"] for p in draft["parts"])

    wrong = text_message("soon", taskId=task["id"])
    again = await result(example, "message/send", {"message": wrong})
    assert (
        again["status"]["state"] == "input-required"
        and "'soon'" in again["status"]["message"]["parts"][0]["text"]
    )

    done = await result(example, "message/send", {"message": text_message("1.4.0", taskId=task["id"])})
    assert done["status"]["state"] == "completed"
    arts = {a["name"]: a for a in done["artifacts"]}
    (file_part,) = arts["changelog"]["parts"]
    assert file_part["file"]["name"] == "CHANGELOG.md" and file_part["file"]["mimeType"] == "text/markdown"
    notes = base64.b64decode(file_part["file"]["bytes"]).decode()
    assert notes.startswith("## 1.4.0\n") and "### Fixes\n- crash on empty input" in notes
    assert arts["summary"]["parts"][0]["data"] == {"version": "1.4.0", "counts": {"Features": 2, "Fixes": 1}}


async def test_nothing_to_do_is_rejected(example):
    task = await result(
        example, "message/send", {"message": text_message(" \n \n", messageId=str(uuid.uuid4()))}
    )
    assert task["status"]["state"] == "rejected"
