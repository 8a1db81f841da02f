"""Screenshots of the console's main pages for the docs (`docs/images/console-*.png`).

`.venv/bin/python scripts/console_screenshots.py`: starts a server on a throwaway SQLite database with the
scripted test agent, gives it a few tasks (finished with a diff, waiting for approval, working, failed), and
photographs the task list, a task page, the new-task form and the agents page with Debian's Chromium.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

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


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
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


if __name__ == "__main__":
    asyncio.run(main())
