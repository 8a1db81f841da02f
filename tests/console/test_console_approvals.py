"""The console's buttons for a tool permission (docs/agents.md#approvals): the real Claude Code CLI, asking
before tools run, against the fake Anthropic API; alice steers it in Chromium."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.cli.test_cli_claude import CLAUDE_ENV
from tests.conftest import make_server
from tests.console.test_console import WAIT_MS, get_task, open_page, send, state_of
from tests.support.auth import api_keys_env
from tests.support.browser import Browser
from tests.support.clis import CLI_BIN, install_clis
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
async def claude_server(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    install_clis()
    fake = FakeAnthropic().start()
    tmp = tmp_path_factory.mktemp("console-approvals")
    agents = {"builder": {"adapter": "claude-code", "bin": str(CLI_BIN / "claude"), "force": False}}
    settings = {
        "AGENTS": json.dumps(agents),
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        **CLAUDE_ENV,
        "ANTHROPIC_BASE_URL": fake.url,
        "AGENT_ENV_PASSTHROUGH": ",".join(CLAUDE_ENV),
        "AGENT_EGRESS_ALLOW": fake.url.removeprefix("http://"),
        "CANCEL_GRACE_S": "2",
    }
    server = await make_server("sqlite", tmp, **api_keys_env(**settings))
    try:
        yield server
    finally:
        server.stop()
        fake.stop()


async def waiting(base_url: str, task_id: str) -> dict[str, Any]:
    """The task once it waits for an answer."""
    going = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
    async with asyncio.timeout(60):
        while (task := await get_task(base_url, task_id))["status"]["state"] in going:
            await asyncio.sleep(0.1)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    return task


async def test_each_open_call_has_its_options_as_buttons(
    browser: Browser, claude_server: ServerProcess, tmp_path: Path
) -> None:
    base = claude_server.base_url
    task = await send(base, "List the two folders of programs.\nPARALLEL: ls /usr | ls /bin")
    task = await waiting(base, task["id"])
    first, second = next(p["data"] for p in task["status"]["message"]["parts"] if "data" in p)["calls"]
    page, watch = await open_page(browser, claude_server, path=f"/console/tasks/{task['id']}")

    calls = page.locator("#approvals .approval-call")
    await expect(calls).to_have_count(2, timeout=WAIT_MS)
    await expect(calls.nth(0)).to_contain_text("ls /usr")
    await expect(calls.nth(1)).to_contain_text("ls /bin")
    buttons = calls.nth(0).locator("button")
    await expect(buttons).to_have_text(["Allow once", "Allow always (Bash ls /usr)", "Deny"])
    await expect(page.locator("#approve")).to_have_text("Approve all")
    await page.screenshot(path=str(tmp_path / "approvals.png"), full_page=True)
    assert await page.locator("#question pre.json").count() == 0  # the buttons show the calls, not JSON

    await page.click(f"button[data-call='{first['id']}'][data-option='deny']")
    # The other call stays open, alone: the task asks again for it.
    await expect(calls).to_have_count(1, timeout=WAIT_MS)
    await expect(calls.nth(0)).to_have_attribute("data-call", second["id"])
    await expect(state_of(page)).to_have_attribute("data-state", "input-required")
    await page.click(f"button[data-call='{second['id']}'][data-option='allow_once']")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    # The stored task first, then the page: a page without the answer then says which of the two lost it.
    stored = await get_task(base, task["id"])
    said = [
        p.get("text", "")
        for a in stored["artifacts"]
        if a.get("name") == "assistant-response"
        for p in a["parts"]
    ]
    assert "".join(said).endswith("Done: 1 ran, 1 failed."), f"the stored answer is not whole: {said}"
    await expect(page.locator("[data-artifact='assistant-response']")).to_contain_text(
        "Done: 1 ran, 1 failed."
    )
    # Each answer is one line of the conversation.
    await expect(page.locator(".approval-answer").first).to_have_text(f"deny (call {first['id']})")
    await page.screenshot(path=str(tmp_path / "done.png"), full_page=True)
    assert watch.errors == [] and watch.dialogs == []


async def test_an_option_button_answers_its_call_with_the_data_part(
    browser: Browser, console_server: ServerProcess
) -> None:
    """The scripted agent's approval on both databases: the button sends that call's option, which the agent
    reads back (`decided:<option>`)."""
    base = console_server.base_url
    task = await waiting(base, (await send(base, "approve:Bash make test"))["id"])
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{task['id']}")
    always = page.locator("#approvals button[data-option='allow_always']")
    await expect(always).to_have_text("Allow always (Bash make *)", timeout=WAIT_MS)
    await always.click()
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(page.locator("[data-artifact='assistant-response']")).to_contain_text("decided:allow_always")
    await expect(page.locator("#approvals")).to_have_count(0)
    assert watch.errors == [] and watch.dialogs == []
