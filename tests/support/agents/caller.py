"""A test agent that hands work to other agents through its `TaskContext` calls, as its message says.

The message text is a JSON list of steps, run in order; each step's outcome is one entry of the list the
task completes with (its final message's text, JSON):

- `{"send": role, "text": str | list, "wait": bool, "files": [{"name", "mediaType", "text"}]}`
  `send_to_agent` (a list is sent as its JSON: the plan of a caller on that role; each file inline, its
  text as its bytes); the outcome is the child as the call returned it
- `{"answer": text}`    `answer_task` of the last child
- `{"get": id | null}`  `get_task` of that task (null: the last child)
- `{"poll": state}`     `get_task` of the last child until it is in `state`
- `{"cancel": id | null}`  `cancel_task`
- `{"list": true}`      `list_agents`: the roles and whether each is available
- `{"usage": [model, input, output, cost]}`  a usage report of its own
- `{"sleep": seconds}`  waits (a cancel stops it)

A refused call (`CallError`) is the outcome `{"error": its text}`; the plan goes on.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app.agents.sdk import Agent, CallError, ChildTask, Part, Skill, TaskContext, Usage

POLL_S = 0.05


def shown(child: ChildTask) -> dict[str, Any]:
    return {
        "taskId": child.task_id,
        "role": child.role,
        "state": child.state,
        "text": child.text,
        "usage": child.usage,
    }


class CallerAgent(Agent):
    name = "Caller Test Agent"
    description = "Hands work to other roles as its message's plan says; used by the test suite."
    skills = (Skill("call", "Call", "Sends tasks to other roles"),)

    async def run(self, task: TaskContext) -> None:
        outcomes: list[Any] = []
        last: str | None = None
        for step in json.loads(task.text):
            try:
                outcome, last = await self._step(task, step, last)
            except CallError as exc:
                outcome = {"error": str(exc)}
            outcomes.append(outcome)
        await task.complete(json.dumps(outcomes))

    async def _step(
        self, task: TaskContext, step: dict[str, Any], last: str | None
    ) -> tuple[Any, str | None]:
        if "send" in step:
            text = step["text"] if isinstance(step["text"], str) else json.dumps(step["text"])
            files = [
                Part(raw=f["text"].encode(), filename=f.get("name"), media_type=f.get("mediaType"))
                for f in step.get("files", [])
            ]
            child = await task.send_to_agent(step["send"], text, files, wait=step.get("wait", True))
            return shown(child), child.task_id
        if "answer" in step:
            return shown(await task.answer_task(last or "", step["answer"])), last
        if "get" in step:
            return shown(await task.get_task(step["get"] or last or "")), last
        if "poll" in step:
            while (child := await task.get_task(last or "")).state != step["poll"]:
                await asyncio.sleep(POLL_S)
            return shown(child), last
        if "cancel" in step:
            return shown(await task.cancel_task(step["cancel"] or last or "")), last
        if "list" in step:
            return [
                {"role": a.role, "name": a.name, "available": a.available} for a in await task.list_agents()
            ], last
        if "usage" in step:
            model, tokens_in, tokens_out, cost = step["usage"]
            await task.usage(Usage.of(model, input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost))
            return "reported", last
        if "sleep" in step:
            await asyncio.sleep(step["sleep"])
            return "slept", last
        raise ValueError(f"not a step: {step}")
