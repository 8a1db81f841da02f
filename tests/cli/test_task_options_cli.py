"""The model a task chooses (`metadata.model`) reaches the real Claude Code CLI: the fake Anthropic API
records the model each Messages request asks for. One server (SQLite) whose role `coder` runs Claude Code in
its jail with `model` claude-sonnet-4-5 and `models` [claude-haiku-4-5]. The limits' refusals on every
binding and a task's timeout: tests/e2e/test_task_options.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support.clis import CLI_BIN, wait_until_stopped
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess

OWN, OTHER = "claude-sonnet-4-5", "claude-haiku-4-5"
CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


@pytest.fixture(scope="module")
async def coder(fake_api: FakeAnthropic, tmp_path_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    tmp = tmp_path_factory.mktemp("claude-task-options")
    agents = {"coder": {"adapter": "claude-code", "model": OWN, "models": [OTHER]}}
    server: ServerProcess = await make_server(
        "sqlite",
        tmp,
        AGENTS=json.dumps(agents),
        CLAUDE_BIN=str(CLI_BIN / "claude"),
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        **CLAUDE_ENV,
        ANTHROPIC_BASE_URL=fake_api.url,
        AGENT_ENV_PASSTHROUGH=",".join([*CLAUDE_ENV, "ANTHROPIC_BASE_URL"]),
        AGENT_EGRESS_ALLOW=fake_api.url.removeprefix("http://"),
        CANCEL_GRACE_S="2",
    )
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield client
    finally:
        server.stop()


def _models_asked(fake: FakeAnthropic, marker: str) -> set[str]:
    """The models of the Messages requests whose prompt carries `marker` (the task's own turn)."""
    return {
        body.get("model", "")
        for body, prompts in zip(fake.requests, fake.prompts(), strict=True)
        if any(marker in p for p in prompts)
    }


@pytest.mark.parametrize(("metadata", "asked"), [({"model": OTHER}, OTHER), ({}, OWN)])
async def test_the_cli_asks_the_model_api_for_the_tasks_model(
    coder: httpx.AsyncClient, fake_api: FakeAnthropic, metadata: dict[str, str], asked: str
) -> None:
    marker = f"say hi {uuid.uuid4()}"
    task = await result(coder, "message/send", {"message": text_message(marker, metadata=metadata)})
    task = await wait_until_stopped(coder, task, within_s=120)
    assert task["status"]["state"] == "completed", task["status"]
    assert _models_asked(fake_api, marker) == {asked}
