"""A repository task's change on the console's task page, in a real browser against a real server process
(SQLite) running the `ndjson` adapter with the fake repository agent (tests/support/fakes/repo_agent.py) on a
checkout of a bare repository the test made: the summary, each turn's diff and the whole one coloured, and
the patch downloaded with the artifact's exact bytes, which `git apply` takes at the base."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.agents.repos.conftest import git
from tests.cli.test_repository import make_origin
from tests.conftest import make_server
from tests.console.test_console import WAIT_MS, get_task, open_page, state_of
from tests.support.auth import api_keys_env, key_of
from tests.support.browser import Browser
from tests.support.clis import FAKES
from tests.support.rpc import start_v10
from tests.support.server import ServerProcess

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
AGENT = shlex.join([PYTHON, str(FAKES / "repo_agent.py")])
OK, BAD, FG = "rgb(31, 122, 61)", "rgb(180, 35, 24)", "rgb(29, 31, 36)"
"""console.css: --ok (an added line), --bad (a removed one), --fg (a context line)."""


class Served:
    def __init__(self, server: ServerProcess, bare: Path) -> None:
        self.server, self.bare = server, bare

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def repository(self) -> dict[str, str]:
        return {"url": f"file://{self.bare}", "ref": "main"}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("console-repos")
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    env = api_keys_env(
        AGENTS=json.dumps({"default": {"adapter": "ndjson"}}),
        AGENT_COMMAND=AGENT,
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        AGENT_SANDBOX_READ=str(FAKES),
        REPO_ALLOW=str(allowed),
        REPO_CACHE_ROOT=str(tmp / "cache"),
        REPO_MAX_DIFF_BYTES="4096",
    )
    server = await make_server("sqlite", tmp, **env)
    try:
        yield Served(server, allowed / "project.git")
    finally:
        server.stop()


def by_id(task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["artifactId"]: a for a in task.get("artifacts", [])}


def raw_of(artifact: dict[str, Any]) -> bytes:
    (part,) = artifact["parts"]
    assert part["mediaType"] == "text/x-diff"
    return base64.b64decode(part["raw"])


async def download(page: Page, box: str) -> tuple[str, bytes]:
    """Click a diff box's download link: the file name the browser was given, and the bytes it saved."""
    async with page.expect_download() as info:
        await page.click(f"{box} a.download")
    done = await info.value
    return done.suggested_filename, Path(await done.path()).read_bytes()


def clone_at(served: Served, base: str, where: Path) -> Path:
    git("clone", "--quiet", str(served.bare), str(where))
    git("checkout", "--quiet", base, cwd=where)
    return where


async def colour(page: Page, selector: str) -> str:
    return await page.locator(selector).first.evaluate("(node) => getComputedStyle(node).color")


async def test_each_turns_diff_is_shown_coloured_and_the_patch_downloads_as_published(
    browser: Browser, served: Served, tmp_path: Path
) -> None:
    base = served.base_url
    edit = await start_v10(
        base, "EDIT", key_of("alice"), wait=True, metadata={"repository": served.repository}
    )
    assert edit["status"]["state"] == "TASK_STATE_COMPLETED", edit["status"]
    # A second task in the context: its change holds both tasks' work; its question ends a first turn.
    asked = await start_v10(base, "ASK", key_of("alice"), contextId=edit["contextId"])
    page, watch = await open_page(browser, served.server, path=f"/console/tasks/{asked['id']}")
    await expect(state_of(page)).to_have_attribute("data-state", "input-required", timeout=WAIT_MS)
    changes = page.locator("#changes")
    turn1 = "#changes [data-diff='turn-1.diff']"
    await expect(page.locator(turn1)).to_contain_text("+- before asking", timeout=WAIT_MS)
    await expect(page.locator("#changes [data-diff='turn-2.diff']")).to_have_count(0)

    # Answered on the page: the next turn's diff comes over the stream.
    await page.fill("#reply-text", "yes")
    await page.click("#answer")
    await expect(state_of(page)).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    turn2 = "#changes [data-diff='turn-2.diff']"
    await expect(page.locator(turn2)).to_contain_text("+- after yes", timeout=WAIT_MS)
    await expect(page.locator(turn2)).not_to_contain_text("+- before asking")
    await expect(page.locator(turn1)).to_contain_text("+- before asking")

    stored = await get_task(base, asked["id"])
    arts = by_id(stored)
    summary = arts[f"{asked['id']}-changes"]["parts"][0]["data"]
    assert summary["turn"]["number"] == 2
    await expect(page.locator("#changes-branch")).to_have_text(summary["branch"])
    rows = page.locator("#changed-files tr[data-path]")
    await expect(rows).to_have_count(5)
    statuses = await rows.evaluate_all("(rows) => rows.map((r) => [r.dataset.path, r.dataset.status])")
    assert dict(statuses) == {
        "CHANGES.md": "modified",
        "blob.bin": "added",
        "notes.md": "added",
        "old.txt": "deleted",
        "src/app.py": "modified",
    }
    await expect(page.locator("#changed-files tr[data-path='blob.bin']")).to_contain_text("binary")
    await expect(page.locator("#changed-files tr[data-path='notes.md']")).to_contain_text("+3")
    await expect(page.locator("#commits li")).to_have_count(len(summary["commits"]))
    await expect(changes.locator("#commits")).to_contain_text("agent: main returns 2")

    whole = "#changes [data-diff='changes.diff']"
    await expect(page.locator(f"{whole} pre.diff")).to_contain_text("+    return 2")
    await expect(page.locator(f"{whole} pre.diff")).to_contain_text("GIT binary patch")
    # Coloured by line: an added line green, a removed one red, a context line as the page's text; a
    # file's `---`/`+++` header is neither a removed nor an added line.
    classes = await page.locator(f"{whole} pre.diff span").evaluate_all(
        "(spans) => Object.fromEntries(spans.map((s) => [s.textContent, s.className]))"
    )
    assert classes["-    return 1"] == "del" and classes["+    return 2"] == "add"
    assert classes["--- a/old.txt"] == classes["+++ /dev/null"] == "head"
    assert classes["@@ -1 +0,0 @@"] == "hunk" and classes[" def main():"] == ""
    assert await colour(page, f"{whole} pre.diff span.add") == OK
    assert await colour(page, f"{whole} pre.diff span.del") == BAD
    assert await colour(page, f"{whole} pre.diff span[class='']") == FG
    # The change's artifacts are shown in its section only, not again in the list of artifacts.
    await expect(page.locator("#artifacts [data-artifact$='.diff']")).to_have_count(0)
    await expect(page.locator("#artifacts [data-artifact='changes']")).to_have_count(0)
    await page.screenshot(path=str(tmp_path / "changes.png"), full_page=True)

    # The downloads: the published bytes exactly, which apply at the base and give the agent's files.
    name, patch = await download(page, whole)
    assert (name, patch) == ("changes.diff", raw_of(arts[f"{asked['id']}-diff"]))
    name, second = await download(page, turn2)
    assert (name, second) == ("turn-2.diff", raw_of(arts[f"{asked['id']}-turn-2"]))
    fresh = clone_at(served, summary["base"], tmp_path / "fresh")
    git("apply", "--check", cwd=fresh, input=patch)
    git("apply", "--index", cwd=fresh, input=patch)
    assert (fresh / "CHANGES.md").read_text() == "- before asking\n- after yes\n"
    assert (fresh / "src" / "app.py").read_text() == "def main():\n    return 2\n"
    assert (fresh / "blob.bin").read_bytes() == bytes(range(256)) * 4
    assert not (fresh / "old.txt").exists()
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_cut_diff_downloads_the_whole_patch(browser: Browser, served: Served, tmp_path: Path) -> None:
    task = await start_v10(
        served.base_url, "BIG", key_of("alice"), wait=True, metadata={"repository": served.repository}
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    arts = by_id(task)
    full = raw_of(arts[f"{task['id']}-diff-full"])
    assert len(full) > 4096, "longer than REPO_MAX_DIFF_BYTES"
    page, watch = await open_page(browser, served.server, path=f"/console/tasks/{task['id']}")
    whole = "#changes [data-diff='changes.diff']"
    await expect(page.locator(f"{whole} pre.diff")).to_contain_text("[diff cut:", timeout=WAIT_MS)
    await expect(page.locator(f"{whole} .note")).to_contain_text("the download is the whole patch")
    name, patch = await download(page, whole)
    assert (name, patch) == ("changes-full.diff", full)
    base = arts[f"{task['id']}-changes"]["parts"][0]["data"]["base"]
    git("apply", "--check", cwd=clone_at(served, base, tmp_path / "fresh"), input=patch)
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_change_that_tries_to_run_script_is_shown_as_text(browser: Browser, served: Served) -> None:
    task = await start_v10(
        served.base_url, "SCRIPT", key_of("alice"), wait=True, metadata={"repository": served.repository}
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    page, watch = await open_page(browser, served.server, path=f"/console/tasks/{task['id']}")
    name = "<img src=x onerror=window.__pwned=1>.html"
    await expect(page.locator("#changed-files tr[data-path]")).to_have_count(1, timeout=WAIT_MS)
    assert await page.locator("#changed-files tr[data-path]").get_attribute("data-path") == name
    await expect(page.locator("#changed-files")).to_contain_text(name)
    await expect(page.locator("#commits")).to_contain_text("<script>window.__pwned = 4</script>")
    diff = page.locator("#changes [data-diff='changes.diff'] pre.diff")
    await expect(diff).to_contain_text("+<script>window.__pwned = 2</script>")
    await expect(diff).to_contain_text('+<img src=x onerror="alert(3)">')
    # The task's only turn is the whole change: not shown twice, still a download of its own.
    turn = "#changes [data-diff='turn-1.diff']"
    await expect(page.locator(turn)).to_contain_text("The same as the whole change above.")
    await expect(page.locator(f"{turn} pre.diff")).to_have_count(0)
    name, patch = await download(page, turn)
    assert (name, patch) == ("turn-1.diff", raw_of(by_id(task)[f"{task['id']}-turn-1"]))
    assert await page.locator("#task img, #task script, #task iframe, #task object, #task embed").count() == 0
    assert await page.evaluate("window.__pwned") is None
    assert watch.dialogs == [] and watch.errors == [] and watch.foreign_requests() == []
    await page.context.close()


async def test_a_turn_that_changes_nothing_says_so(browser: Browser, served: Served) -> None:
    task = await start_v10(
        served.base_url, "NOTHING", key_of("alice"), wait=True, metadata={"repository": served.repository}
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    ids = set(by_id(task))
    assert f"{task['id']}-changes" in ids and not ids & {f"{task['id']}-diff", f"{task['id']}-turn-1"}
    page, watch = await open_page(browser, served.server, path=f"/console/tasks/{task['id']}")
    await expect(page.locator("#changes")).to_contain_text("No file changed.", timeout=WAIT_MS)
    await expect(page.locator("#changes .diff-box")).to_have_count(0)
    assert not watch.errors and not watch.dialogs
    await page.context.close()


async def test_a_change_that_could_not_be_measured_says_why(browser: Browser, served: Served) -> None:
    task = await start_v10(
        served.base_url, "BREAK", key_of("alice"), wait=True, metadata={"repository": served.repository}
    )
    (part,) = by_id(task)[f"{task['id']}-changes"]["parts"]
    assert part["data"]["error"], part
    page, watch = await open_page(browser, served.server, path=f"/console/tasks/{task['id']}")
    await expect(page.locator("#changes .error")).to_have_text(
        f"The change could not be measured: {part['data']['error']}", timeout=WAIT_MS
    )
    await expect(page.locator("#changes .diff-box")).to_have_count(0)
    assert not watch.errors and not watch.dialogs
    await page.context.close()
