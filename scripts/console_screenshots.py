"""Screenshots of the console's main pages for the docs (`docs/images/console-*.png`).

`.venv/bin/python scripts/console_screenshots.py`: starts a server on a throwaway SQLite database with the
scripted test agent, gives it a few tasks (finished with a diff, waiting for approval, working, failed), and
photographs the task list, a task page, the new-task form and the agents page with Debian's Chromium; then
another with a team whose agents call each other (tests/support/agents/delegate.py), and photographs a task
tree. `... console_screenshots.py tree` takes the tree alone.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import httpx
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.rpc import start_v10 as send  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

OUT = ROOT / "docs" / "images"
DIFF = "say:" + "\n".join(
    [
        "--- a/app/auth.py",
        "+++ b/app/auth.py",
        "@@ -12,3 +12,4 @@",
        " def check(token):",
        "-    return token",
        "+    if not token:",
        "+        raise Unauthenticated()",
        "+    return verify(token)",
    ]
)


TEAM = {
    "lead": {"adapter": "tests.support.agents.delegate:DelegateAgent"},
    "reviewer": {"adapter": "tests.support.agents.delegate:DelegateAgent"},
    "tester": {"adapter": "scripted"},
}
LEAD = (
    "Add rate limiting to the login endpoint, then have it reviewed\n"
    "call reviewer: Review the rate-limit change in app/login.py\n"
    "call tester: The suite passes: 142 tests, the new limit's 3 included"
    " || call tester: Load test at 200 logins/s: 429 after the 5th try, as configured"
)


async def tree() -> None:
    """A lead that called a reviewer (which called a tester) and a tester: the reviewer's page."""
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(
            f"sqlite+aiosqlite:///{tmp}/console.db", Path(tmp) / "server.log", AGENTS=json.dumps(TEAM)
        )
        server.migrate()
        server.start()
        try:
            base = server.base_url
            lead = await send(base, LEAD, wait=True)
            async with httpx.AsyncClient(timeout=30) as c:
                found = (await c.get(f"{base}/console/api/tasks/{lead['id']}/tree")).json()
            reviewer = found["children"][0]["id"]
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1280, "height": 760})
                await page.goto(f"{base}/console/tasks/{reviewer}")
                await page.locator("#task-tree").wait_for()
                await page.screenshot(path=str(OUT / "console-tree.png"))
                print(OUT / "console-tree.png")
                await browser.close()
        finally:
            server.stop()


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["tree"]:
        await tree()
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(f"sqlite+aiosqlite:///{tmp}/console.db", Path(tmp) / "server.log")
        server.migrate()
        server.start()
        try:
            base = server.base_url
            await send(
                base,
                "Fix the login check in app/auth.py;"
                + DIFF
                + ";tool:Edit;usage:claude-sonnet-4-5:18250:1420:0.0761",
            )
            await send(base, "say:Looking at the failing test;tool:Bash;sleep:600")
            await send(base, "fail:The test suite did not start: no such file tests/conftest.py")
            waiting = await send(
                base,
                "Refactor the retry loop in client.py;say:I read client.py and its tests.;tool:Read;"
                "ask:Allow Bash: pytest -q tests/test_client.py?",
            )
            await asyncio.sleep(1.5)
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1280, "height": 760})
                for path, name in (
                    ("/console", "console-tasks.png"),
                    (f"/console/tasks/{waiting['id']}", "console-task.png"),
                    ("/console/new", "console-new.png"),
                    ("/console/agents", "console-agents.png"),
                ):
                    await page.goto(base + path)
                    await page.wait_for_timeout(1500)
                    await page.screenshot(path=str(OUT / name))
                    print(OUT / name)
                await browser.close()
        finally:
            server.stop()
    await tree()


if __name__ == "__main__":
    asyncio.run(main())
