"""The default agent: answers with the user's text, so `make run` works with nothing else installed."""

from __future__ import annotations

from .sdk import Agent, Skill, TaskContext


class EchoAgent(Agent):
    name = "Echo Agent"
    description = "Answers every message with its own text. The zero-set-up default adapter."
    pure = True
    skills = (
        Skill(
            id="echo",
            name="Echo",
            description="Repeats the text of the user's message as the assistant response.",
            tags=("echo", "test"),
            examples=("hello",),
        ),
    )

    async def run(self, task: TaskContext) -> None:
        await task.say(task.text)
