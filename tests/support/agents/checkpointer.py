"""A test agent that keeps its task's checkpoint through `TaskContext.checkpoints`, as a CLI adapter does.

The message text is JSON `{"save": text, "hold": bool}`: the run saves `text` as its archive (manifest
`{"step": "first", "text": text}`), reads it back, and completes with what it read (JSON: `data`,
`manifest`, `holder`, `maxBytes`). With `hold` it announces `holding` instead and waits until the server
drains it: its drain hook takes `drainS` seconds (0 unless given), saves the archive `drained` (manifest
`{"step": "drain"}`) and says it saved one.
A run that goes on with a task another holder left (`TaskContext.resumed`) completes at once with the
checkpoint it finds and the resume (`resumed`: its attempt, `previous`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app.agents.checkpoints import Checkpoint
from app.agents.sdk import Agent, Skill, TaskContext


def shown(found: Checkpoint | None) -> dict[str, Any]:
    if found is None:
        return {"data": None}
    return {"data": found.data.decode(), "manifest": found.manifest, "holder": found.holder}


class CheckpointAgent(Agent):
    name = "Checkpoint Test Agent"
    description = "Saves and reads its task's checkpoint; used by the test suite."
    skills = (Skill("checkpoint", "Checkpoint", "Keeps a checkpoint"),)

    async def run(self, task: TaskContext) -> None:
        store = task.checkpoints
        if store is None:
            await task.fail("This run was given no checkpoint store.")
            return
        if task.resumed is not None:
            resumed = {"attempt": task.resumed.attempt, "previous": task.resumed.previous}
            await task.complete(json.dumps({**shown(await store.load()), "resumed": resumed}))
            return
        plan = json.loads(task.text)
        await store.save(plan["save"].encode(), {"step": "first", "text": plan["save"]})
        if not plan.get("hold"):
            await task.complete(json.dumps({**shown(await store.load()), "maxBytes": store.max_bytes}))
            return

        async def drained() -> bool:
            await asyncio.sleep(plan.get("drainS", 0))  # a CLI stopping and archiving a large workspace
            await store.save(b"drained", {"step": "drain"})
            return True

        task.on_drain(drained)
        await task.working("holding")
        await asyncio.Event().wait()  # until the server stops the run
