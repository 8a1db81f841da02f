"""The console in a real browser (Debian's Chromium through Playwright) against a real server process, on
both databases: a live list, a task page that streams, steering (approve, deny, answer, follow-up, cancel,
a new task), output that tries to run script, and one principal never seeing another's tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.conftest import make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.browser import Browser, Watch, sign_in
from tests.support.rpc import start_v10
from tests.support.server import ROOT, ServerProcess

CONSOLE_FILES = ROOT / "app" / "console"
"""The page's files as committed (served from the package as they are)."""
WAIT_MS = 15_000
"""Longest a test waits for the page to show something (a wait, never a measure: the list refreshes
every 0.7 s)."""


async def send(
    base_url: str, text: str, who: str = "alice", role_path: str = "", **message: Any
) -> dict[str, Any]:
    """A task started through the A2A API, as any client would, by `who`."""
    return await start_v10(base_url, text, key_of(who), role_path, **message)


async def get_task(base_url: str, task_id: str, who: str = "alice") -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    async with httpx.AsyncClient(timeout=30) as c:
        resp = await c.post(
            f"{base_url}/a2a/jsonrpc", json=body, headers={**key_of(who), "A2A-Version": "1.0"}
        )
    return resp.json()["result"]


async def open_page(
    browser: Browser, server: ServerProcess, who: str = "alice", path: str = "/console"
) -> tuple[Page, Watch]:
    context = await browser.new_context()
    page = await context.new_page()
    watch = Watch(page, server.base_url)
    await sign_in(page, server.base_url, who, path)
    watch.errors.clear()  # the page's first call, before signing in, was answered 401 as it must be
    return page, watch


def state_of(page: Page) -> Any:
    return page.locator("#task-state")


async def test_list_is_live_and_the_task_page_streams(
    browser: Browser, console_server: ServerProcess
) -> None:
    page, watch = await open_page(browser, console_server)
    await expect(page.locator("#task-rows")).to_be_attached()
    loads = len(watch.navigations)

    task = await send(console_server.base_url, "say:first words;ask:go on?;say: last words")
    row = page.locator(f"tr[data-task-id='{task['id']}']")
    await expect(row).to_be_visible(timeout=WAIT_MS)
    await expect(row).to_have_attribute("data-state", "input-required", timeout=WAIT_MS)
    assert len(watch.navigations) == loads, "the list must update without a reload"

    await row.locator("a.title").click()
    await expect(page).to_have_url(f"{console_server.base_url}/console/tasks/{task['id']}")
    response = page.locator("[data-artifact='assistant-response']")
    await expect(response).to_contain_text("first words", timeout=WAIT_MS)
    await expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    loads = len(watch.navigations)

    # Answered elsewhere (by the API): the open page's artifact grows over its stream.
    async with httpx.AsyncClient(timeout=30) as c:
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "taskId": task["id"],
                    "contextId": task["contextId"],
                    "parts": [{"text": "yes"}],
                },
                "configuration": {"returnImmediately": True},
            },
        }
        await c.post(
            f"{console_server.base_url}/a2a/jsonrpc",
            json=body,
            headers={**key_of("alice"), "A2A-Version": "1.0"},
        )
    await expect(response).to_contain_text("answer:yes", timeout=WAIT_MS)
    await expect(response).to_contain_text("last words", timeout=WAIT_MS)
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(page.locator("#transitions li")).to_have_count(
        5
    )  # submitted working input working completed
    assert len(watch.navigations) == loads, "the task page must stream without a reload"
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_approve_deny_answer_follow_up_and_cancel(
    browser: Browser, console_server: ServerProcess
) -> None:
    base = console_server.base_url
    approve = await send(base, "tool:Bash;ask:Allow Bash to run ls?")
    deny = await send(base, "ask:Allow rm -rf?")
    answer = await send(base, "ask:Which branch?")
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{approve['id']}")

    await expect(page.locator("#question")).to_contain_text("Allow Bash to run ls?", timeout=WAIT_MS)
    await expect(page.locator("#tool-calls")).to_contain_text("Bash")
    await page.click("#approve")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(page.locator("[data-artifact='assistant-response']")).to_contain_text("answer:approve")
    # Only the page's own parts: once the question is gone nothing stands in for it (a null rendered as the
    # text "null" once did).
    assert await page.evaluate(
        "[...document.getElementById('task').children].every((part) =>"
        " [...part.childNodes].every((n) => n.nodeType === 1))"
    )

    await page.goto(f"{base}/console/tasks/{deny['id']}")
    await page.click("#deny")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    stored = await get_task(base, deny["id"])
    said = "".join(p.get("text", "") for a in stored["artifacts"] for p in a["parts"])
    assert "answer:deny" in said
    assert {"data": {"decision": "deny"}} in [
        {"data": p["data"]} for m in stored["history"] for p in m["parts"] if "data" in p
    ], "a deny carries the decision as data, which the CLI adapters read"

    await page.goto(f"{base}/console/tasks/{answer['id']}")
    await page.fill("#reply-text", "release-2")
    await page.click("#answer")
    await expect(page.locator("[data-artifact='assistant-response']")).to_contain_text(
        "answer:release-2", timeout=WAIT_MS
    )

    # A follow-up to a finished task is a new task in its context; the page moves to it.
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await page.fill("#reply-text", "say:and one more thing")
    await page.click("#follow-up")
    await expect(page).not_to_have_url(f"{base}/console/tasks/{answer['id']}", timeout=WAIT_MS)
    follow_id = page.url.rsplit("/", 1)[-1]
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    follow = await get_task(base, follow_id)
    assert follow["contextId"] == answer["contextId"] and follow_id != answer["id"]

    slow = await send(base, "say:started;sleep:120")
    await page.goto(f"{base}/console/tasks/{slow['id']}")
    await expect(page.locator("[data-artifact='assistant-response']")).to_contain_text(
        "started", timeout=WAIT_MS
    )
    await page.click("#cancel")
    await expect(state_of(page)).to_have_attribute("data-state", "canceled", timeout=WAIT_MS)
    assert (await get_task(base, slow["id"]))["status"]["state"] == "TASK_STATE_CANCELED"
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_snapshot_that_changes_nothing_leaves_the_text_being_typed_alone(
    browser: Browser, console_server: ServerProcess
) -> None:
    """The cause of a follow-up that never happened: after an answer the page reloads the task, and that
    snapshot (answered after the stream had shown `completed`) rebuilt the steering panel, so the text box
    being typed in was replaced (focus and the typed text lost; the click then sent nothing). The page's
    snapshot requests are held here until the stream has shown the end and the user has started typing:
    the same box, focused, with its text, must still be there once they are answered."""
    base = console_server.base_url
    task = await send(base, "ask:Which branch?")
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{task['id']}")
    await expect(page.locator("#question")).to_contain_text("Which branch?", timeout=WAIT_MS)

    held: list[Any] = []
    release = asyncio.Event()

    async def hold(route: Any) -> None:
        held.append(route)
        await release.wait()
        await route.continue_()

    url = f"**/console/api/tasks/{task['id']}"
    asked: list[Any] = []
    answered: list[Any] = []
    page.on("request", lambda r: asked.append(r) if r.url.endswith(task["id"]) else None)
    page.on("requestfinished", lambda r: answered.append(r) if r.url.endswith(task["id"]) else None)
    await page.route(url, hold)
    await page.fill("#reply-text", "release-2")
    await page.click("#answer")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    async with asyncio.timeout(WAIT_MS / 1000):
        while not held:  # the reload after the answer waits for its snapshot
            await asyncio.sleep(0.05)
    await page.click("#reply-text")
    await page.keyboard.type("say:half")
    await page.evaluate("window.typedIn = document.getElementById('reply-text')")
    release.set()
    async with asyncio.timeout(WAIT_MS / 1000):
        while len(answered) < len(asked):  # every snapshot the page asked for is in (a reload may ask twice)
            await asyncio.sleep(0.05)
    await page.unroute(url)
    await page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    assert await page.evaluate("document.getElementById('reply-text') === window.typedIn"), "box replaced"
    assert await page.evaluate("document.activeElement === window.typedIn"), "focus taken from the box"
    await page.keyboard.type(" more")
    assert await page.input_value("#reply-text") == "say:half more"
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_snapshot_the_stream_outran_never_rolls_the_page_back(
    browser: Browser, console_server: ServerProcess
) -> None:
    """The cause of an answer's end missing from a finished task's page (seen with Claude Code's approvals on
    a busy machine): after an answer the page loads the task again while its stream goes on, and a snapshot
    that comes back after the stream has shown newer events replaced them; loading once more was not enough,
    as that load can be outrun too. Here every load after the answer is taken when asked and answered only
    once the stream has shown something newer: the page must still end with every word, once each."""
    base = console_server.base_url
    steps = "say:first words;ask:go on?;say: one;sleep:1;say: two;sleep:1;say: three;sleep:1;say: four"
    task = await send(base, steps)
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{task['id']}")
    await expect(page.locator("#question")).to_contain_text("go on?", timeout=WAIT_MS)
    response = page.locator("[data-artifact='assistant-response']")
    words = ["first words", "answer:yes", " one", " two", " three", " four"]
    late: list[str] = []

    async def outrun(route: Any) -> None:
        fetched = await route.fetch()
        snapshot = await fetched.json()
        has = "".join(p.get("text", "") for a in snapshot["task"].get("artifacts", []) for p in a["parts"])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAIT_MS / 1000):
                while snapshot["task"]["status"]["state"] != "TASK_STATE_COMPLETED":
                    shown = await response.inner_text()
                    if any(w.strip() in shown and w.strip() not in has for w in words):
                        late.append(snapshot["lastSeq"])
                        break
                    if await state_of(page).get_attribute("data-state") == "completed":
                        late.append(snapshot["lastSeq"])
                        break
                    await asyncio.sleep(0.05)
        await route.fulfill(response=fetched)

    def snapshots(url: str) -> bool:
        return url.endswith(f"/console/api/tasks/{task['id']}")

    await page.route(snapshots, outrun)
    await page.fill("#reply-text", "yes")
    await page.click("#answer")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(response).to_contain_text("four", timeout=WAIT_MS)
    assert late, "no load was outrun"  # what the page must survive did happen
    await page.unroute(snapshots)
    shown = await response.inner_text()
    assert shown == "assistant-response\n" + "".join(words), "the page lost or repeated part of the answer"
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_new_task_with_a_file_on_a_role(
    browser: Browser, console_server: ServerProcess, tmp_path: Any
) -> None:
    page, watch = await open_page(browser, console_server, path="/console/new")
    notes = tmp_path / "notes.txt"
    notes.write_text("release notes draft")
    await page.select_option("#new-role", "default")
    await page.fill("#new-text", "say:got it")
    await page.set_input_files("#new-files", str(notes))
    await page.click("#new-task button[type=submit]")
    await page.wait_for_url(f"{console_server.base_url}/console/tasks/**", timeout=WAIT_MS)
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    task = await get_task(console_server.base_url, page.url.rsplit("/", 1)[-1])
    files = [p for p in task["history"][0]["parts"] if "raw" in p]
    assert files and files[0]["filename"] == "notes.txt" and files[0]["mediaType"] == "text/plain"
    await expect(page.locator(".message.user .file")).to_contain_text("notes.txt")
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_hostile_output_is_shown_as_text_and_runs_nothing(
    browser: Browser, console_server: ServerProcess
) -> None:
    task = await send(console_server.base_url, "show me", role_path="/agents/hostile")
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{task['id']}")
    await expect(state_of(page)).to_have_attribute("data-state", "input-required", timeout=WAIT_MS)
    text = page.locator("[data-artifact='hostile-text']")
    await expect(text).to_contain_text("<script>window.__pwned = 1")
    await expect(text).to_contain_text("<img src=x onerror=")
    await expect(page.locator("[data-artifact='hostile-data']")).to_contain_text("onerror")
    await expect(page.locator("#question")).to_contain_text("Allow <script>")
    # The javascript: URL is text, not a link; the http one is a link that nothing follows by itself.
    links = page.locator("[data-artifact='hostile-links']")
    await expect(links.locator("span.unsafe")).to_contain_text("javascript:alert")
    assert await links.locator("a[href^='javascript']").count() == 0
    await links.locator("span.unsafe").click()
    # The HTML file is a download of bytes, never rendered.
    await expect(page.locator("[data-artifact='hostile-file'] a.download")).to_contain_text("page.html")
    assert await page.locator("#task img").count() == 0
    assert await page.locator("#task script, #task iframe, #task object, #task embed").count() == 0

    await page.click("#approve")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(page.locator("#conversation")).to_contain_text("<a href=\"javascript:alert('link')\">")
    assert await page.evaluate("window.__pwned") is None
    assert watch.dialogs == []
    assert watch.errors == []
    assert watch.foreign_requests() == []
    await page.context.close()


async def test_the_page_carries_a_strict_policy(console_server: ServerProcess) -> None:
    # Every ES module the page imports (app/console/*.js), served as a script the policy allows.
    modules = [f"/console/assets/{p.name}" for p in sorted(CONSOLE_FILES.glob("*.js"))]
    assert "/console/assets/console.js" in modules
    async with httpx.AsyncClient(base_url=console_server.base_url, timeout=30) as c:
        for path in ("/console", "/console/tasks/x", *modules, "/console/assets/console.css"):
            resp = await c.get(path)
            assert resp.status_code == 200, path
            if path.endswith(".js"):
                assert resp.headers["content-type"] == "text/javascript; charset=utf-8", path
                assert resp.headers["cache-control"] == "no-cache", path
            csp = resp.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert resp.headers["x-content-type-options"] == "nosniff"
            assert "set-cookie" not in resp.headers
        page = (await c.get("/console")).text
        # No inline script and no inline event handler: the policy would refuse them anyway.
        assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page) is None
        assert re.search(r"\son[a-z]+\s*=", page) is None
        assert (await c.get("/console/assets/nope.js")).status_code == 404
        assert (await c.get("/console/api/me")).status_code == 401


async def test_bob_never_sees_alices_tasks(browser: Browser, console_server: ServerProcess) -> None:
    base = console_server.base_url
    secret = await send(base, "say:alice's secret plan")
    own = await send(base, "say:bob's own", who="bob")
    page, watch = await open_page(browser, console_server, who="bob")
    await expect(page.locator(f"tr[data-task-id='{own['id']}']")).to_be_visible(timeout=WAIT_MS)
    assert await page.locator(f"tr[data-task-id='{secret['id']}']").count() == 0
    # The text filter and a made-up owner do not reach her either.
    await page.fill("#filter-text", "secret")
    await page.click("#filters button[type=submit]")
    await expect(page.locator("#task-rows tr")).to_have_count(0, timeout=WAIT_MS)
    await page.goto(f"{base}/console?owner=alice")
    await expect(page.locator("#status")).to_contain_text("admin", timeout=WAIT_MS)
    # Her task's deep link: not found, and nothing of hers in any answer the page read.
    await page.goto(f"{base}/console/tasks/{secret['id']}")
    await expect(page.locator("#status")).to_contain_text("not found", timeout=WAIT_MS)
    # Once the refusal the page showed is recorded (answers are read as they come), not after a pause.
    async with asyncio.timeout(WAIT_MS / 1000):
        while not any(secret["id"] in body for body in watch.bodies):
            await asyncio.sleep(0.05)
    assert not any("secret plan" in body or "alice" in body for body in watch.bodies)
    # Her task's id comes back only in the refusal of the link bob followed.
    assert all('"error"' in body for body in watch.bodies if secret["id"] in body)
    assert watch.bodies, "the page's answers were recorded"
    await page.context.close()


async def test_an_admin_sees_every_owner_and_can_only_watch(
    browser: Browser, console_server: ServerProcess
) -> None:
    base = console_server.base_url
    theirs = await send(base, "ask:Ship it?")
    page, _ = await open_page(browser, console_server, who="carol", path="/console?owner=*")
    row = page.locator(f"tr[data-task-id='{theirs['id']}']")
    await expect(row).to_be_visible(timeout=WAIT_MS)
    await expect(row).to_contain_text("alice")
    await row.locator("a.title").click()
    await expect(page.locator("#question")).to_contain_text("Ship it?", timeout=WAIT_MS)
    await expect(page.locator("#steer")).to_contain_text("only by its owner")
    assert await page.locator("#approve, #cancel").count() == 0
    await page.context.close()


async def test_filters_by_state_role_and_text(browser: Browser, console_server: ServerProcess) -> None:
    base = console_server.base_url
    mark = uuid.uuid4().hex[:8]
    waiting = await send(base, f"ask:filter-{mark}?")
    done = await send(base, f"say:filter-{mark}")
    hostile = await send(base, f"filter-{mark}", role_path="/agents/hostile")
    page, _ = await open_page(browser, console_server, path=f"/console?q=filter-{mark}")
    for t in (waiting, done, hostile):
        await expect(page.locator(f"tr[data-task-id='{t['id']}']")).to_be_visible(timeout=WAIT_MS)
    await page.goto(f"{base}/console?q=filter-{mark}&role=hostile")
    await expect(page.locator("#task-rows tr")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(f"tr[data-task-id='{hostile['id']}']")).to_be_visible()
    await page.goto(f"{base}/console?q=filter-{mark}&state=TASK_STATE_COMPLETED")
    await expect(page.locator(f"tr[data-task-id='{done['id']}']")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#task-rows tr")).to_have_count(1)
    await page.context.close()


async def test_a_task_shows_its_role_skill_and_model_in_the_list_and_on_its_page(
    browser: Browser, console_server: ServerProcess
) -> None:
    base = console_server.base_url
    mark = uuid.uuid4().hex[:8]
    chosen = await send(base, f"say:role-{mark}", metadata={"skill": "script", "model": "small-model"})
    plain = await send(base, f"role-{mark}", role_path="/agents/hostile")
    page, watch = await open_page(browser, console_server, path=f"/console?q=role-{mark}")
    row = page.locator(f"tr[data-task-id='{chosen['id']}'] td.role")
    await expect(row).to_have_text("default · script", timeout=WAIT_MS)
    await expect(page.locator(f"tr[data-task-id='{plain['id']}'] td.role")).to_have_text("hostile")
    await page.goto(f"{base}/console/tasks/{chosen['id']}")
    await expect(page.locator("#task-role")).to_have_text("default", timeout=WAIT_MS)
    await expect(page.locator("#task-skill")).to_have_text("script")
    await expect(page.locator("#task-model")).to_have_text("small-model")
    assert watch.errors == []
    await page.context.close()


@pytest.mark.parametrize("wrong", ["not-a-key"])
async def test_sign_in_refuses_a_wrong_credential_and_keeps_it_out_of_urls(
    browser: Browser, console_server: ServerProcess, wrong: str
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    watch = Watch(page, console_server.base_url)
    await page.goto(console_server.base_url + "/console")
    await page.fill("#credential", wrong)
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#sign-in-error")).to_contain_text("not accepted")
    await sign_in(page, console_server.base_url, "alice")
    assert not any(wrong in u or "alice-" in u for u in watch.requests)
    await context.close()


async def test_the_agents_page_lists_roles_and_live_instances(
    browser: Browser, console_server: ServerProcess
) -> None:
    page, watch = await open_page(browser, console_server, path="/console/agents")
    for role in ("default", "hostile"):
        await expect(page.locator(f"#roles tr[data-role='{role}']")).to_contain_text("yes", timeout=WAIT_MS)
    # Read once both roles show as available: the server's entries are written by then.
    async with httpx.AsyncClient(base_url=console_server.base_url, timeout=30) as c:
        listing = (await c.get("/agents", headers=key_of("alice"))).json()
    rows = page.locator("#instances tbody tr")
    await expect(rows).to_have_count(len(listing["agents"]))
    first = listing["agents"][0]
    await expect(page.locator("#instances")).to_contain_text(f"{first['running']} / {first['slots']}")
    assert not watch.errors
    await page.context.close()


async def test_a_role_that_requires_an_extension_is_steered_with_it(browser: Browser, tmp_path: Any) -> None:
    """The page names the extensions a role's card requires in its A2A calls, so they are not refused."""
    uri = "https://example.com/ext/review/v1"
    extensions = json.dumps([{"uri": uri, "description": "Review", "required": True}])
    server = await make_server("sqlite", tmp_path, **api_keys_env(CARD_EXTENSIONS=extensions))
    try:
        page, watch = await open_page(browser, server, path="/console/new")
        await page.fill("#new-text", "ask:Merge it?")
        await page.click("#new-task button[type=submit]")
        await page.wait_for_url(f"{server.base_url}/console/tasks/**", timeout=WAIT_MS)
        await page.click("#approve")
        await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
        assert not watch.errors
        await page.context.close()
    finally:
        server.stop()


async def test_usage_and_tool_calls_show_and_grow_live(
    browser: Browser, console_server: ServerProcess
) -> None:
    """The task's summed usage (metadata `usage`) and the adapters' tool calls (status metadata `toolCall`)
    on the page; the sum is read again when a report comes over the stream (here one sent 3 s after an
    answer given elsewhere, when the page is streaming again)."""
    base = console_server.base_url
    task = await send(
        base,
        "tool:Read;usage:model-a:100:10:0.01;ask:go on?;sleep:3;usage:model-a:50:5:0.005;sleep:1;say:done",
    )
    page, watch = await open_page(browser, console_server, path=f"/console/tasks/{task['id']}")
    await expect(page.locator("[data-usage='inputTokens']")).to_have_text("100", timeout=WAIT_MS)
    await expect(page.locator("[data-usage='costUsd']")).to_have_text("$0.0100")
    await expect(page.locator("#tool-calls")).to_contain_text("Read")
    await expect(page.locator("#tool-calls")).to_contain_text('"path": "README.md"')
    await start_v10(base, "yes", key_of("alice"), taskId=task["id"], contextId=task["contextId"])
    await expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    await expect(page.locator("[data-usage='inputTokens']")).to_have_text("150", timeout=WAIT_MS)
    await expect(page.locator("[data-usage='costUsd']")).to_have_text("$0.0150")
    await expect(page.locator("tr[data-model='model-a']")).to_contain_text("150")
    stored = (await get_task(base, task["id"]))["metadata"]["usage"]
    assert stored["inputTokens"] == 150 and abs(stored["costUsd"] - 0.015) < 1e-9
    await page.goto(f"{base}/console")
    await expect(page.locator(f"tr[data-task-id='{task['id']}']")).to_contain_text("$0.0150", timeout=WAIT_MS)
    assert not watch.errors and not watch.dialogs
    await page.context.close()
