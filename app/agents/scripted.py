"""A test agent whose behaviour the message text scripts, so every server path can be exercised.

The text is a `;`-separated list of steps, run in order:

- `say:<text>`      one thinking chunk
- `chunks:<n>`      n thinking chunks `chunk-0 ` ... `chunk-(n-1) `
- `tool:<name>`     a tool_use, then a tool_result whose output is 300 characters long
- `ask:<question>`  approval_required, then wait for the answer and say `answer:<its text>`
- `approve:<tool> <command>`  approval_required for that tool call, with its approval data part
                    (`approvals.py`; `allow_always` would allow `<first word> *`), then wait for the answer
                    and say `decided:<option>` for each decision
- `sleep:<secs>`    wait (cancel stops it)
- `fail:<text>`     an error event: the task fails with that text
- `crash`           raise an exception inside the adapter
- `stats`           finish with a summary and stats (the `result` artifact)
- `usage:<model>:<input>:<output>[:<cost>]`  report usage (tokens; the cost in USD when given, else the price
                    table's)
- `stop`            end the event stream without done or error

After the last step, `done` is emitted. Any other text is echoed like the echo agent does. The session it
reports names the model the task chose (`metadata.model`), else `scripted`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from app.protocol.usage import Usage

from .approvals import Rule, ToolCall, decisions, describe_calls
from .events import AgentEvent, AgentRun, EventAgent
from .sdk import Request, Skill


class ScriptedRun(AgentRun):
    def script(self) -> str:
        """The steps to run: the message's text (a demo's agent may take them from elsewhere)."""
        return self.request.message.text()

    async def events(self) -> AsyncIterator[AgentEvent]:
        model = self.request.model or "scripted"
        yield AgentEvent.init(model=model, session_id=f"session-{self.request.task_id}")
        summary: str | None = None
        stats: dict[str, int] | None = None
        for step in self.script().split(";"):
            verb, _, arg = step.strip().partition(":")
            if verb == "say":
                yield AgentEvent.thinking(arg)
            elif verb == "chunks":
                for i in range(int(arg)):
                    yield AgentEvent.thinking(f"chunk-{i} ")
            elif verb == "tool":
                yield AgentEvent.tool_use(arg, {"path": "README.md"})
                yield AgentEvent.tool_result("x" * 300, name=arg)
            elif verb == "ask":
                yield AgentEvent.approval_required(arg)
                answer = await self.wait_answer()
                yield AgentEvent.thinking(f"answer:{answer.text()}")
            elif verb == "approve":
                tool, _, command = arg.partition(" ")
                always = Rule(tool, f"{command.split()[0]} *" if command.split() else None)
                call = ToolCall(f"call-{self.request.task_id}", tool, {"command": command}, always, command)
                yield AgentEvent.approval_required(describe_calls([call]), calls=[call])
                answer = await self.wait_answer()
                yield AgentEvent.thinking(" ".join(f"decided:{d.option}" for d in decisions(answer)))
            elif verb == "sleep":
                await asyncio.sleep(float(arg))
            elif verb == "fail":
                yield AgentEvent.error(arg)
                return
            elif verb == "crash":
                raise RuntimeError("scripted crash")
            elif verb == "usage":
                model, tokens_in, tokens_out, *cost = arg.split(":")
                yield AgentEvent.usage_report(
                    Usage.of(
                        model,
                        input_tokens=int(tokens_in),
                        output_tokens=int(tokens_out),
                        cost_usd=float(cost[0]) if cost else None,
                    )
                )
            elif verb == "stats":
                summary, stats = "all steps ran", {"steps": 1, "turns": 2}
            elif verb == "stop":
                return
            else:
                yield AgentEvent.thinking(step)
        yield AgentEvent.done(summary=summary, stats=stats)


class ScriptedAgent(EventAgent):
    name = "Scripted Test Agent"
    description = "Follows a script in the message text; used by the test suite."
    skills = (
        Skill(
            id="script",
            name="Scripted steps",
            description="Runs say/chunks/tool/ask/sleep/fail steps named in the message text.",
            tags=("test",),
            examples=("tool:Read;ask:Proceed?;say:done",),
        ),
    )

    def start(self, request: Request) -> AgentRun:
        return ScriptedRun(request)
