"""The console's task page through nginx over three replicas keeps streaming when the replica serving its
stream is killed: the page subscribes again with `Last-Event-ID` and another replica serves the rest from
the log, every chunk once and in order.

The task runs on a fourth replica outside nginx (same database and Redis), so killing each of the three in
turn is sure to kill the one serving the page's stream, and never the one running the task."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from playwright.async_api import Page, expect

from tests.support.browser import Browser, Watch
from tests.support.cluster import TEST_ENV
from tests.support.rpc import start_v10
from tests.support.server import ServerProcess

CHUNKS = 300
STREAM = ";".join(f"say:[{i}];sleep:0.1" for i in range(CHUNKS))
"""About 35 s of output, a chunk every 0.1 s: long enough to kill three replicas under it."""
WAIT_MS = 20_000
ARTIFACT = "[data-artifact='assistant-response']"
PROGRESS = """([connects, seen]) => {
  const live = document.querySelector('#live');
  const art = document.querySelector("[data-artifact='assistant-response']");
  const n = (art ? art.textContent.match(/\\[\\d+\\]/g) || [] : []).length;
  return Number(live.dataset.connects || 0) > connects || n >= seen + 5;
}"""
"""The stream dropped and the page subscribed again, or five more chunks came over the same connection."""


def chunks_seen(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


async def connects(page: Page) -> int:
    return int(await page.locator("#live").get_attribute("data-connects") or 0)


async def test_a_task_page_keeps_streaming_when_its_replica_is_killed(
    browser: Browser, cluster_factory: Any, tmp_path: Path
) -> None:
    cluster = await cluster_factory(3)
    outside = ServerProcess(
        cluster.database_url,
        tmp_path / "outside.log",
        **TEST_ENV,
        REDIS_URL=cluster.redis_url,
        REPLICA_ID="outside",
        PUBLIC_URL=cluster.nginx_url,
    )
    await asyncio.to_thread(outside.start)
    try:
        task = await start_v10(outside.base_url, STREAM)
        page = await (await browser.new_context()).new_page()
        watch = Watch(page, cluster.nginx_url)
        await page.goto(f"{cluster.nginx_url}/console/tasks/{task['id']}")
        await expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
        dropped = 0
        for i in range(3):
            before = await connects(page)
            seen = len(chunks_seen(await page.locator(ARTIFACT).text_content() or ""))
            await asyncio.to_thread(cluster.kill, i)
            await page.wait_for_function(PROGRESS, arg=[before, seen], timeout=WAIT_MS)
            if await connects(page) > before:
                dropped += 1
                # Served again, by another replica, from where the dead one left off.
                last = chunks_seen(await page.locator(ARTIFACT).text_content() or "")[-1]
                await expect(page.locator(ARTIFACT)).to_contain_text(f"[{last + 5}]", timeout=WAIT_MS)
            await asyncio.to_thread(cluster.start_replica, i)
        assert dropped >= 1, "one of the three replicas served the stream, and each was killed"
        await expect(page.locator("#task-state")).to_have_attribute("data-state", "completed", timeout=60_000)
        seen = chunks_seen(await page.locator(ARTIFACT).text_content() or "")
        assert seen == list(range(CHUNKS)), "every chunk once, in order, across the reconnects"
        assert not watch.dialogs
        await page.context.close()
    finally:
        await asyncio.to_thread(outside.stop)
