"""The default agent: answers with the user's text, so `make run` works with nothing else installed."""

from __future__ import annotations

from collections.abc import AsyncIterator

from .base import Agent, AgentEvent, AgentRequest, AgentRun, Skill


class EchoRun(AgentRun):
    async def events(self) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.init()
        yield AgentEvent.thinking(self.request.message.text())
        yield AgentEvent.done()


class EchoAgent(Agent):
    name = "Echo Agent"
    description = "Answers every message with its own text. The zero-set-up default adapter."
    skills = (
        Skill(
            id="echo",
            name="Echo",
            description="Repeats the text of the user's message as the assistant response.",
            tags=("echo", "test"),
            examples=("hello",),
        ),
    )

    def start(self, request: AgentRequest) -> AgentRun:
        return EchoRun(request)
