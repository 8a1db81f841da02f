"""Screenshots of the console's main pages for the docs (`docs/images/console-*.png`).

`.venv/bin/python scripts/console_screenshots.py`: starts a server on a throwaway SQLite database with a team
of three roles (coder, reviewer, tester) of the demo agent (tests/support/agents/demo.py), gives it the tasks
people would send (finished with a diff, reviewed, failed, working, waiting for approval on a model the
task chose), and photographs the task list, a task page, the new-task form and the agents page with
Debian's Chromium; then another with a team whose agents call each other (tests/support/agents/delegate.py),
and photographs a task tree. `... console_screenshots.py tree` takes the tree alone. The agents take the
steps they play from their role's options, keyed by the request's text, so every title reads as a request.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.rpc import start_v10 as send  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

OUT = ROOT / "docs" / "images"
DEMO = "tests.support.agents.demo:DemoAgent"
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
OUTPUTS = {
    "Read": "client.py: 212 lines (fetch(url, retries=3) retries in a while loop with a fixed sleep)",
    "Edit": "app/auth.py: 1 edit applied",
    "Bash": "pytest -q tests/test_checkout.py: 1 failed, 11 passed (test_checkout_total: 19.99 != 20.0)",
}


def skill(sid: str, name: str, description: str) -> dict[str, Any]:
    return {"id": sid, "name": name, "description": description, "tags": [sid]}


# The tasks people would send, each with the steps the demo agent plays for it (not shown as its title).
FIX = "Fix the login check in app/auth.py: an empty token is let through"
REFACTOR = "Refactor the retry loop in client.py to use exponential backoff"
CHECKOUT = "Find out why test_checkout fails on CI since this morning"
RELEASE = "Run the whole test suite on the release-2.4 branch"
REVIEW = "Review the pull request that adds payment retries"
TASKS = [
    # (role, text, steps, metadata)
    ("coder", FIX, f"{DIFF};tool:Edit;usage:claude-sonnet-4-5:18250:1420:0.0761", {"skill": "coding"}),
    (
        "reviewer",
        REVIEW,
        "tool:Read;say:Two remarks: the retry budget is unbounded, and a declined card is retried."
        ";usage:claude-sonnet-4-5:31200:2210:0.1268",
        {"skill": "review"},
    ),
    ("tester", RELEASE, "tool:Bash;fail:The test suite did not start: no such file tests/conftest.py", {}),
    ("tester", CHECKOUT, "say:Looking at the failing test;tool:Bash;sleep:600", {"skill": "tests"}),
    (
        "coder",
        REFACTOR,
        "say:I read client.py and its tests.;tool:Read;approve:Bash pytest -q tests/test_client.py",
        {"skill": "coding", "model": "claude-opus-4-1"},
    ),
]
MAIN = {
    "coder": {
        "adapter": DEMO,
        "model": "claude-sonnet-4-5",
        "models": ["claude-opus-4-1"],
        "options": {"scripts": {t[1]: t[2] for t in TASKS if t[0] == "coder"}, "outputs": OUTPUTS},
        "card": {
            "name": "Coder",
            "description": "Writes and fixes code in the task's repository.",
            "skills": [skill("coding", "Coding", "Fixes, features and refactors")],
        },
    },
    "reviewer": {
        "adapter": DEMO,
        "options": {"scripts": {t[1]: t[2] for t in TASKS if t[0] == "reviewer"}, "outputs": OUTPUTS},
        "card": {
            "name": "Reviewer",
            "description": "Reviews a change and says what to fix.",
            "skills": [skill("review", "Review", "Reviews a diff or a pull request")],
        },
    },
    "tester": {
        "adapter": DEMO,
        "options": {"scripts": {t[1]: t[2] for t in TASKS if t[0] == "tester"}, "outputs": OUTPUTS},
        "card": {
            "name": "Tester",
            "description": "Runs and investigates the test suites.",
            "skills": [skill("tests", "Tests", "Runs test suites and explains failures")],
        },
    },
}


LEAD = "Add rate limiting to the login endpoint, then have it reviewed"
REVIEWER = "Review the rate-limit change in app/login.py"
UNIT = "Run the login tests against the new limit"
LOAD = "Load-test the login endpoint at 200 logins/s"
TEAM = {
    "lead": {
        "adapter": "tests.support.agents.delegate:DelegateAgent",
        "options": {"plans": {LEAD: f"call reviewer: {REVIEWER} || call tester: {LOAD}"}},
    },
    "reviewer": {
        "adapter": "tests.support.agents.delegate:DelegateAgent",
        "options": {"plans": {REVIEWER: f"call tester: {UNIT}"}},
    },
    "tester": {
        "adapter": DEMO,
        "options": {
            "scripts": {
                UNIT: "tool:Bash;say:The suite passes: 142 tests, the new limit's 3 included",
                LOAD: "tool:Bash;say:429 after the 5th try in a minute, as configured",
            },
            "outputs": {"Bash": "pytest -q tests/test_login.py: 142 passed"},
        },
    },
}


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
        server = ServerProcess(
            f"sqlite+aiosqlite:///{tmp}/console.db", Path(tmp) / "server.log", AGENTS=json.dumps(MAIN)
        )
        server.migrate()
        server.start()
        try:
            base = server.base_url
            tasks = []
            for role, text, steps, metadata in TASKS:
                path = "" if role == "coder" else f"/agents/{role}"
                wait = "sleep:" not in steps  # a task left working is not waited for
                tasks.append(await send(base, text, None, path, wait=wait, metadata=metadata))
            waiting = tasks[-1]
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
