"""A test agent that hands work to other roles through its `TaskContext` (agents calling agents) the way a
person's lead would: a title line, then the calls, and a child's question asked of its own client (the
question goes up the tree). `caller.py` is the test suite's other, a JSON plan of every call; this one makes
the console's trees read like a team's.

The text is `||`-separated calls, made in order, each `call <role>: <message>`: the message goes to the role
(which may be a caller too, so `call reviewer: call checker: say:ok` makes a grandchild). A first line that is
not a call is what a person would have written, and is only read (a task's title). A child that asks
(input-required) has its question asked of this task's own client, and the answer is handed down to it.
The task completes with each child's answer, one line a child: `<role>: <state>: <text>`. With `plans` (the
role's `options` in AGENTS: request text → calls), a text found there makes the calls its plan names, so the
task's text is the request alone (the docs' screenshots).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.agents.sdk import Agent, Skill, TaskContext


class DelegateAgent(Agent):
    name = "Delegate"
    description = "Hands the work its message names to other roles"
    skills = (Skill("call", "Call other agents", "Sends work to other roles and reports their answers"),)

    def __init__(self, plans: Mapping[str, str] | None = None) -> None:
        self.plans = dict(plans or {})

    async def run(self, task: TaskContext) -> None:
        lines = []
        prose, _, rest = task.text.partition("\n")
        script = task.text if prose.startswith("call ") or not rest else rest
        script = self.plans.get(task.text.strip(), script)
        for step in script.split("||"):
            head, _, message = step.strip().partition(":")
            verb, _, role = head.strip().partition(" ")
            if verb != "call" or not role:
                await task.fail(f"Not a call: {step.strip()!r}")
                return
            child = await task.send_to_agent(role.strip(), message.strip())
            while child.state in ("input-required", "auth-required"):
                answer = await task.ask(f"{child.role} asks: {child.text}")
                child = await task.answer_task(child.task_id, answer.text())
            lines.append(f"{child.role}: {child.state}: {child.text}")
        await task.complete("\n".join(lines))
