"""Bench agent for our server: `AGENT_ADAPTER=bench.agents:StampAgent` (the replica needs ROOT on PYTHONPATH).

The message text chooses what a run does:

- `stamp:<count>:<interval_ms>:<delay_ms>` waits `delay_ms` (time for a reader elsewhere to subscribe), then
  emits `count` thinking chunks `interval_ms` apart on a fixed schedule, each chunk's text being
  `time.time_ns()` taken when the chunk is emitted, then `done`. The propagation bench subtracts it from the
  time a reader on another replica receives the chunk.
- a step of the scripted test agent (`chunks:20000`, `sleep:600`, `sleep:1;chunks:5000`, ...) runs
  `app/agents/scripted.py`'s run.
- anything else is echoed exactly as the default echo agent does (the throughput bench).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from app.agents.events import AgentEvent, AgentRun, EventAgent
from app.agents.scripted import ScriptedRun
from app.agents.sdk import Request, Skill

from .stamp import STAMP, parse_stamp

SCRIPT_VERBS = frozenset({"say", "chunks", "tool", "ask", "sleep", "fail", "crash", "stats", "stop"})


class StampRun(AgentRun):
    """Thinking chunks stamped with the wall clock (ns) at emission, on a fixed schedule."""

    async def events(self) -> AsyncIterator[AgentEvent]:
        count, interval, delay = parse_stamp(self.request.message.text())
        yield AgentEvent.init(model="stamp")
        loop = asyncio.get_running_loop()
        start = loop.time() + delay
        for i in range(count):
            wait = start + i * interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            yield AgentEvent.thinking(str(time.time_ns()))
        yield AgentEvent.done()


class EchoRun(AgentRun):
    """The echo agent's output as events: one chunk of the user's text, then done."""

    async def events(self) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.init()
        yield AgentEvent.thinking(self.request.message.text())
        yield AgentEvent.done()


class StampAgent(EventAgent):
    """Stamped chunks, scripted steps or an echo, chosen by the message text (see the module doc)."""

    name = "Bench Stamp Agent"
    description = "Emits chunks stamped with their emission time; used by bench/cluster.py."
    skills = (
        Skill(
            id="stamp",
            name="Stamped chunks",
            description="stamp:<count>:<interval_ms>:<delay_ms>; scripted steps; else an echo.",
            tags=("bench",),
            examples=("stamp:200:5:500", "chunks:20000", "hello"),
        ),
    )

    def start(self, request: Request) -> AgentRun:
        text = request.message.text()
        if text.startswith(STAMP):
            return StampRun(request)
        if text.split(";", 1)[0].partition(":")[0].strip() in SCRIPT_VERBS:
            return ScriptedRun(request)
        return EchoRun(request)
