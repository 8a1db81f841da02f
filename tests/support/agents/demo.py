"""A scripted agent whose tasks read like a person's: the docs' screenshots (scripts/console_screenshots.py).

The scripted test agent (`app/agents/scripted.py`) runs the steps its message's text names, so a task's title
would be its script (`Refactor ...;say:...;tool:Read;ask:...`). This one looks the text up in its `scripts`
(the role's `options` in AGENTS: request text → steps) and runs those steps instead; a text it does not know
is run as the scripted agent would. Its session names the model the task chose, else its role's `model`
option, and a tool's output is the role's `outputs` for that tool (else a short line), not the test agent's
300 x's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from app.agents.events import AgentEvent, AgentEventKind, AgentRun
from app.agents.scripted import ScriptedAgent, ScriptedRun
from app.agents.sdk import Request


class DemoRun(ScriptedRun):
    def __init__(self, request: Request, agent: DemoAgent) -> None:
        super().__init__(request)
        self.agent = agent

    def script(self) -> str:
        text = self.request.message.text()
        return self.agent.scripts.get(text.strip(), text)

    async def events(self) -> AsyncIterator[AgentEvent]:
        async for ev in super().events():
            if ev.kind is AgentEventKind.INIT:
                yield AgentEvent.init(model=self.request.model or self.agent.model, session_id=ev.session_id)
            elif ev.kind is AgentEventKind.TOOL_RESULT:
                name = ev.tool_name or "tool"
                yield AgentEvent.tool_result(self.agent.outputs.get(name, f"{name}: done"), name=name)
            else:
                yield ev


class DemoAgent(ScriptedAgent):
    name = "Demo Agent"
    description = "Answers a demo's requests from a table of scripts; used for the docs' screenshots."

    def __init__(
        self,
        scripts: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        model: str = "claude-sonnet-4-5",
    ) -> None:
        self.scripts = dict(scripts or {})
        self.outputs = dict(outputs or {})
        self.model = model

    def start(self, request: Request) -> AgentRun:
        return DemoRun(request, self)
