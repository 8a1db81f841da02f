"""A task tree on the console, in a real browser against a real server process on both databases.

The tree is built through the public API alone, by a Python agent (tests/support/agents/delegate.py) that
hands work to other roles through its TaskContext (`lead` → `reviewer` → `checker`, and `lead` → `checker`). A
parent's page shows its children and theirs (role, state, title, link), a child's page links to its parent
and names its call path, a child's state changes show on the parent's page without a reload, titles are
text, and the tree read is its owner's alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.conftest import BACKENDS, make_server
from tests.console.test_console import WAIT_MS, get_task, open_page, state_of
from tests.support.auth import api_keys_env, key_of
from tests.support.browser import Browser
from tests.support.rpc import start_v10
from tests.support.server import ServerProcess

AGENTS = {
    "lead": {"adapter": "tests.support.agents.delegate:DelegateAgent"},
    "reviewer": {"adapter": "tests.support.agents.delegate:DelegateAgent"},
    "checker": {"adapter": "scripted"},
}
HOSTILE = "<img src=x onerror=\"window.__pwned = 1, alert('tree')\">"
"""A grandchild's message, so its title (shown in every tree it is in) tries to run script."""
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


@pytest.fixture(scope="module", params=BACKENDS)
async def team(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"console-tree-{request.param}"),
        **api_keys_env(AGENTS=json.dumps(AGENTS), CONSOLE_ADMINS="carol"),
    )
    yield srv
    srv.stop()


async def until(base: str, task_id: str, states: set[str], who: str = "alice") -> dict[str, Any]:
    """The task once it is in one of `states` (read through A2A, as a client would)."""
    while True:
        task = await get_task(base, task_id, who)
        if task["status"]["state"] in states:
            return task
        if task["status"]["state"] in TERMINAL:
            raise AssertionError(f"task {task_id} ended {task['status']} before reaching {states}")
        await asyncio.sleep(0.1)


async def tree_of(base: str, task_id: str, who: str = "alice") -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as c:
        return await c.get(f"{base}/console/api/tasks/{task_id}/tree", headers=key_of(who))


async def test_a_parent_shows_its_tree_and_a_child_links_to_its_parent(
    browser: Browser, team: ServerProcess, tmp_path: Path
) -> None:
    base = team.base_url
    lead = await start_v10(
        base,
        f"call reviewer: call checker: say:{HOSTILE};usage:m:10:5:0.01"
        " || call checker: say:a second look;usage:m:100:20:0.25",
        key_of("alice"),
    )
    done = await until(base, lead["id"], {"TASK_STATE_COMPLETED"})
    assert "reviewer: completed" in json.dumps(done["history"]), done

    # The tree as the console's read gives it: the reviewer (with its own child) first, then the checker.
    resp = await tree_of(base, lead["id"])
    assert resp.status_code == 200, resp.text
    tree = resp.json()
    assert tree["ancestors"] == [] and tree["cut"] is False
    assert [(n["role"], [c["role"] for c in n["children"]]) for n in tree["children"]] == [
        ("reviewer", ["checker"]),
        ("checker", []),
    ]
    reviewer, second = tree["children"]
    grandchild = reviewer["children"][0]
    assert reviewer["parentTaskId"] == lead["id"] and grandchild["parentTaskId"] == reviewer["id"]
    assert (grandchild["callDepth"], grandchild["callPath"]) == (2, ["lead", "reviewer", "checker"])
    # What a client of the reviewer's endpoints sees of its parent.
    child = await get_task(base + "/agents/reviewer", reviewer["id"])
    assert child["metadata"]["parentTaskId"] == lead["id"]
    # Another principal is told the task does not exist; the console admin reads it.
    assert (await tree_of(base, lead["id"], "bob")).status_code == 404
    assert (await tree_of(base, lead["id"], "carol")).json() == tree

    page, watch = await open_page(browser, team, path=f"/console/tasks/{lead['id']}")
    section = page.locator("#task-tree")
    here = section.locator(f"li.here[data-tree-task='{lead['id']}']")
    await expect(here).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#parent-link")).to_have_count(0)  # a task a client started has no parent
    below = here.locator(f":scope > ul > li[data-tree-task='{reviewer['id']}']")
    await expect(below).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(below.locator(":scope > .tree-entry .tree-role")).to_have_text("reviewer")
    nested = below.locator(f":scope > ul > li[data-tree-task='{grandchild['id']}']")
    await expect(nested.locator(":scope > .tree-entry .tree-role")).to_have_text("checker")
    await expect(nested.locator("a.title")).to_have_text(f"say:{HOSTILE};usage:m:10:5:0.01")
    await expect(here.locator(f":scope > ul > li[data-tree-task='{second['id']}'] a.title")).to_have_text(
        "say:a second look;usage:m:100:20:0.25"
    )
    # The children's usage, rolled up once into the lead's (the grandchild's through the reviewer's).
    assert done["metadata"]["usage"]["children"]["costUsd"] == pytest.approx(0.26)
    await expect(page.locator("#usage [data-usage='children']")).to_contain_text("$0.2600 (2 tasks it called")
    await page.screenshot(path=str(tmp_path / "parent.png"), full_page=True)

    # Down to the grandchild: its parent's link, its call path, the tasks above it.
    await nested.locator("a.title").click()
    await expect(page).to_have_url(f"{base}/console/tasks/{grandchild['id']}")
    await expect(page.locator("#parent-link")).to_have_text(reviewer["id"], timeout=WAIT_MS)
    await expect(page.locator("#call-path")).to_have_text("lead → reviewer → checker (depth 2)")
    root = page.locator(f"#task-tree ul.tree > li[data-tree-task='{lead['id']}']")
    await expect(
        root.locator(f":scope > ul > li[data-tree-task='{reviewer['id']}'] li.here")
    ).to_have_attribute("data-tree-task", grandchild["id"])
    await expect(page.locator(".task-head h1")).to_have_text(f"say:{HOSTILE};usage:m:10:5:0.01")
    await page.screenshot(path=str(tmp_path / "grandchild.png"), full_page=True)

    # Up to the parent by its link.
    await page.locator("#parent-link").click()
    await expect(page).to_have_url(f"{base}/console/tasks/{reviewer['id']}")
    await expect(page.locator("#parent-link")).to_have_text(lead["id"], timeout=WAIT_MS)
    await expect(page.locator("#call-path")).to_have_text("lead → reviewer (depth 1)")
    await expect(
        page.locator(f"#task-tree li.here > ul > li[data-tree-task='{grandchild['id']}']")
    ).to_be_visible()

    # The list marks a child as called.
    await page.goto(f"{base}/console")
    await expect(page.locator(f"tr[data-task-id='{reviewer['id']}'] .called")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator(f"tr[data-task-id='{lead['id']}'] .called")).to_have_count(0)

    assert not watch.errors and not watch.dialogs
    assert await page.evaluate("window.__pwned === undefined")
    await page.context.close()


async def test_a_childs_state_changes_show_on_its_parents_page(browser: Browser, team: ServerProcess) -> None:
    """The checker asks; its question goes up to the lead's client, whose answer the lead hands down: the
    lead's open page shows its child waiting, then completed, without a reload."""
    base = team.base_url
    lead = await start_v10(base, "call checker: ask:Ship it?", key_of("alice"))
    asked = await until(base, lead["id"], {"TASK_STATE_INPUT_REQUIRED"})
    assert "Ship it?" in json.dumps(asked["status"]), asked["status"]
    child = (await tree_of(base, lead["id"])).json()["children"][0]

    page, watch = await open_page(browser, team, path=f"/console/tasks/{lead['id']}")
    row = page.locator(f"#task-tree li[data-tree-task='{child['id']}']")
    await expect(row).to_have_attribute("data-state", "input-required", timeout=WAIT_MS)
    loads = len(watch.navigations)

    await start_v10(base, "yes", key_of("alice"), taskId=lead["id"], contextId=lead["contextId"])
    await expect(row).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    assert len(watch.navigations) == loads, "the tree must follow its tasks without a reload"
    assert not watch.errors and not watch.dialogs
    await page.context.close()
