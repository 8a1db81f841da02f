"""Spend against the budgets on the console, in a real browser against a real server process (SQLite).

The scripted agent's role has a budget of 0.05 USD a task and the server a day's budget of 1 USD a
principal. A task that reports 0.02 USD three times fails past its budget; its page shows its spend against
its budget, flagged, and the usage page shows alice's spend today against the day's budget (bob's, who spent
nothing, is his own)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.conftest import make_server
from tests.console.test_console import WAIT_MS, open_page, send, state_of
from tests.console.test_console_tree import until
from tests.support.auth import api_keys_env
from tests.support.browser import Browser
from tests.support.server import ServerProcess

AGENTS = {"default": {"adapter": "scripted", "budget_usd": 0.05}}


@pytest.fixture(scope="module")
async def budgets(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("console-budget"),
        **api_keys_env(AGENTS=json.dumps(AGENTS), BUDGET_DAY_USD="1"),
    )
    yield srv
    srv.stop()


async def test_a_task_page_and_the_usage_page_show_spend_against_the_budgets(
    browser: Browser, budgets: ServerProcess, tmp_path: Path
) -> None:
    base = budgets.base_url
    spend = "say:Refactoring the retry loop in client.py;" + ";".join(
        ["usage:claude-sonnet-4-5:900:120:0.02"] * 3
    )
    task = await send(base, spend + ";sleep:60")
    failed = await until(base, task["id"], {"TASK_STATE_FAILED"})
    assert "spent $0.06 against its budget of $0.05" in json.dumps(failed["status"])

    page, watch = await open_page(browser, budgets, path=f"/console/tasks/{task['id']}")
    await expect(state_of(page)).to_have_text("failed", timeout=WAIT_MS)
    await expect(page.locator("#task-budget")).to_have_text("$0.06 of $0.05 (over budget)")
    await expect(page.locator("#task-budget")).to_have_class("over-budget")
    await page.screenshot(path=str(tmp_path / "task-budget.png"), full_page=True)

    await page.locator("#nav-usage").click()
    await expect(page.locator("#day-spend")).to_have_text("$0.06 of $1.00", timeout=WAIT_MS)
    await expect(page.locator("#day-meter")).to_have_attribute("value", "0.06")
    await expect(page.locator("#usage-days tbody tr")).to_have_count(1)
    await page.screenshot(path=str(tmp_path / "usage-budget.png"), full_page=True)
    assert watch.errors == [] and watch.foreign_requests() == []

    bob, _ = await open_page(browser, budgets, who="bob", path="/console/usage")
    await expect(bob.locator("#day-spend")).to_have_text("$0.00 of $1.00", timeout=WAIT_MS)
