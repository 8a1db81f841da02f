"""A run's checkpoint: what another machine needs to go on with a task whose holder died.

A checkpoint is one archive (`data`, whole or absent: the store keeps its digest and refuses a copy that does
not match it) and a JSON `manifest` saying what it holds (the adapter, the CLI's session id, the workspace's
path where it was taken, the session files). The server gives a run a `CheckpointStore` bound to its task and
its owner (`TaskContext.checkpoints`): a run can neither read nor write another task's checkpoint, so one
principal's workspace is never restored into another's task.

A run that goes on with a task another holder left (`TaskContext.resumed`) restores the checkpoint before
it starts its agent, and tells the agent its previous run was interrupted. What goes in the archive and how
it is restored is the adapter's (`cli/checkpoint.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class CheckpointError(Exception):
    """A checkpoint that cannot be used: corrupt (its digest does not match), unreadable, or too large. Its
    text says which, for the task's failure reason."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A task's saved run, as the store returns it."""

    data: bytes
    """The archive, exactly as saved (its digest checked by the store)."""
    manifest: dict[str, Any]
    """What the archive holds (the adapter's JSON)."""
    taken_at: datetime
    holder: str
    """Who saved it: a replica's id, or `worker:<principal>:<instance>`."""


class CheckpointStore(Protocol):
    """Where a run saves its task's checkpoint and the next holder finds it, bound to one task and its owner
    (`store/run_checkpoints.py` on a replica, the worker endpoints in a remote worker)."""

    max_bytes: int
    """The largest archive the store takes (CHECKPOINT_MAX_MB); a larger one is CheckpointError."""

    async def save(self, data: bytes, manifest: dict[str, Any]) -> None:
        """Replace the task's checkpoint with this one, atomically."""
        ...

    async def load(self) -> Checkpoint | None:
        """The task's checkpoint, None when it has none; CheckpointError when it is corrupt."""
        ...


@dataclass(frozen=True, slots=True)
class Resumed:
    """This run goes on with a task whose previous holder stopped (`TaskContext.resumed`)."""

    attempt: int
    """This run's attempt: 2 for the first resume."""
    previous: str
    """Who ran it before, for people: "replica r1", "worker w1"."""
    reason: str
    """Why the previous run stopped."""
    pending: str | None = None
    """The user's latest message when the previous run may never have had it (sent after the previous
    run last spoke: an answer to its question that reached the task as its holder died)."""

    def note(self) -> str:
        """What the resumed agent is told before it goes on."""
        note = (
            f"Your previous run of this task was interrupted ({self.reason}). The workspace and your session "
            "are as they were at the last checkpoint. Check the state of the work and continue the task "
            "from where it stopped."
        )
        if self.pending is not None:
            note += "\n\nThe user's latest message, which the interrupted run may not have received:\n"
            note += self.pending
        return note
