"""What the task service needs of whatever runs agents (the runner implements it)."""

from __future__ import annotations

from typing import Protocol

from app.protocol.model import Message


class Executor(Protocol):
    """Runs agents for tasks: slots, starting and stopping runs, answers, direct replies."""

    pure: bool
    """The agent has no effects beyond the events it emits (`Agent.pure`): its run may start before its
    task is committed, and a run whose task then fails to commit is dropped."""

    def reserve(self) -> bool:
        """Take one agent slot for a task about to start here; False when all are busy."""
        ...

    def release_slot(self) -> None:
        """Give back a slot `reserve` took for a task that did not start."""
        ...

    def start(self, task_id: str, reserved: bool = False) -> None:
        """Run the task's agent here (in the slot `reserve` took, when `reserved`)."""
        ...

    async def stop(self, task_id: str) -> None:
        """Stop the task's run, if it runs here."""
        ...

    def lost(self, task_id: str) -> None:
        """Another replica says it ended or took over this task: if its run is here and the database agrees
        the task is no longer this replica's, stop the run."""
        ...

    async def answer(self, task_id: str, message: Message) -> None:
        """Hand the user's answer to the task's waiting run (or start one)."""
        ...

    async def reply(self, owner: str, message: Message) -> Message | None:
        """The agent's direct Message for a new message, when it answers without a task."""
        ...
