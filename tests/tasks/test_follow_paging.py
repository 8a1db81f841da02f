"""A stream far behind its task reads the event log a page at a time (`follow.REPLAY_PAGE`) and still gets
every event once and in order: resumed from a cursor, and stalled long enough that its subscription
overflowed into a resync. In process (MemoryBus, SQLite)."""

from __future__ import annotations

import asyncio

from app.agents.sdk import TaskContext
from app.protocol.events import EventRecord
from app.protocol.model import TaskState
from app.tasks import follow
from app.tasks.follow import Snapshot
from tests.support.inproc import OWNER, WAIT_S, running, send

CHUNKS = 2 * follow.REPLAY_PAGE + 234
"""More chunks than two pages, so a replay takes three."""


async def chunky(task: TaskContext) -> None:
    if task.text == "chunks":
        for i in range(CHUNKS):
            await task.say(f"{i} ")


def chunk_texts(records: list[EventRecord]) -> list[str]:
    out = []
    for r in records:
        artifact = getattr(r.event, "artifact", None)
        if artifact is not None:
            out += [p.text for p in artifact.parts if getattr(p, "text", None)]
    return out


async def test_a_resume_from_the_start_replays_every_page_in_order(tmp_path):
    async with running(tmp_path, chunky) as c:
        task = await send(c, "chunks")
        assert task.status.state is TaskState.COMPLETED
        pages = []
        read = c.service._reader._repo.events_after

        async def counted(*args, **kw):
            page = await read(*args, **kw)
            pages.append((kw.get("limit"), len(page)))
            return page

        c.service._reader._repo.events_after = counted
        async with asyncio.timeout(WAIT_S):
            replay = [r async for r in await c.service.resubscribe(OWNER, task.id, after=0)]
    seqs = [r.seq for r in replay]
    assert seqs == list(range(1, len(seqs) + 1))
    assert "".join(chunk_texts(replay)).split() == [str(i) for i in range(CHUNKS)]
    assert replay[-1].event.status.state is TaskState.COMPLETED
    assert len(pages) >= 3 and all(limit == follow.REPLAY_PAGE for limit, _ in pages)


async def test_a_stalled_stream_overflows_into_a_resync_and_misses_nothing(tmp_path):
    gate = asyncio.Event()

    async def gated(task: TaskContext) -> None:
        await gate.wait()
        await chunky(task)

    async with running(tmp_path, gated) as c:
        task = await send(c, "chunks", blocking=False)
        stream = await c.service.resubscribe(OWNER, task.id)
        first = await anext(stream)
        assert isinstance(first, Snapshot)
        gate.set()
        # Not reading while the task writes far more than the subscription holds (it overflows).
        async with asyncio.timeout(WAIT_S):
            while (await c.service.get(OWNER, task.id)).status.state is not TaskState.COMPLETED:
                await asyncio.sleep(0.05)
        async with asyncio.timeout(WAIT_S):
            rest = [r async for r in stream]
    seqs = [r.seq for r in rest]
    assert seqs == list(range(first.seq + 1, first.seq + 1 + len(seqs)))
    assert "".join(chunk_texts(rest)).split() == [str(i) for i in range(CHUNKS)]
    assert rest[-1].event.status.state is TaskState.COMPLETED
