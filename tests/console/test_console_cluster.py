"""The console's task page through nginx over three replicas keeps streaming when the replica serving its
stream is killed: the page subscribes again with `Last-Event-ID` and another replica serves the rest from
the log, every chunk once and in order.

The task runs on a fourth replica outside nginx (same database and Redis), so a kill never stops the task.
Which replica serves the page's stream is read from state (each replica's open SSE streams in `/metrics`:
the page's is the only one), and that one is killed, twice in a row. The task streams far longer than the
test needs and is canceled at the end, so no kill can come after it has finished."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect

from scripts.ready import log_tail
from tests.support.browser import Browser, Watch
from tests.support.cluster import TEST_ENV, Cluster
from tests.support.rpc import result, start_v10
from tests.support.server import ServerProcess

CHUNKS = 3000
STREAM = ";".join(f"say:[{i}];sleep:0.1" for i in range(CHUNKS))
"""About five minutes of output, a chunk every 0.1 s: the test cancels it once the kills are done."""
KILLS = 2
WAIT_MS = 60_000
WAIT_S = WAIT_MS / 1000
ARTIFACT = "[data-artifact='assistant-response']"
RESUMED = """([connects, seen]) => {
  const live = document.querySelector('#live');
  const art = document.querySelector("[data-artifact='assistant-response']");
  const n = (art ? art.textContent.match(/\\[\\d+\\]/g) || [] : []).length;
  return Number(live.dataset.connects || 0) > connects && n >= seen + 5;
}"""
"""The stream dropped, the page subscribed again, and five more chunks came after the ones seen before."""


def chunks_seen(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


async def connects(page: Page) -> int:
    return int(await page.locator("#live").get_attribute("data-connects") or 0)


async def open_streams(url: str) -> float:
    """The SSE streams a replica has open now (every binding)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        text = (await c.get("/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("a2a_http_open_streams{")
    )


async def serving(cluster: Cluster) -> int:
    """The replica serving the page's stream: once exactly one live replica has a stream open."""
    counts: dict[int, float] = {}
    try:
        async with asyncio.timeout(WAIT_S):
            while True:
                live = [r for r in cluster.replicas if r.alive()]
                counts = {r.index: await open_streams(r.url) for r in live}
                holding = [i for i, n in counts.items() if n > 0]
                if len(holding) == 1:
                    return holding[0]
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"no single replica serves the page's stream: open streams {counts}") from None


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
        async with httpx.AsyncClient(base_url=outside.base_url, timeout=30) as client:
            for _ in range(KILLS):
                victim = await serving(cluster)
                before = await connects(page)
                seen = len(chunks_seen(await page.locator(ARTIFACT).text_content() or ""))
                got = await result(client, "tasks/get", {"id": task["id"], "historyLength": 0})
                assert got["status"]["state"] == "working", "the stream is killed under a running task"
                await asyncio.to_thread(cluster.kill, victim)
                # Served again, by another replica, from where the dead one left off.
                try:
                    await page.wait_for_function(RESUMED, arg=[before, seen], timeout=WAIT_MS)
                except Exception as exc:
                    raise AssertionError(
                        f"the page did not resume: {exc}\n{log_tail(outside.log_path)}"
                    ) from exc
            await result(client, "tasks/cancel", {"id": task["id"]})
        await expect(page.locator("#task-state")).to_have_attribute("data-state", "canceled", timeout=WAIT_MS)
        seen = chunks_seen(await page.locator(ARTIFACT).text_content() or "")
        assert seen == list(range(len(seen))), "every chunk once, in order, across the reconnects"
        assert await connects(page) >= KILLS + 1
        assert not watch.dialogs
        await page.context.close()
    finally:
        await asyncio.to_thread(outside.stop)
