"""One role's parts as this process writes its tasks (`RoleParts`): the repository and leases scoped to the
role, the process's group-commit writer and bus, and the role's names. Built once per role by the wiring
(`wiring.role_parts`, which the admin command line calls too) and held by the role's `LiveTasks`, through
which the task service, control, the worker desk and the losses reach them: one seam instead of the same
four or six arguments to each constructor.

It imports the stores and the bus, for their types only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.bus.base import Bus
    from app.store.leases import Leases
    from app.store.repo import Repository
    from app.store.run_checkpoints import RunCheckpoints
    from app.store.writer import Writer


@dataclass(frozen=True, slots=True)
class RoleParts:
    """What one role's tasks are read, written, leased and announced through, in this process."""

    repo: Repository
    writer: Writer
    bus: Bus
    leases: Leases
    """Held in this process's name (`replica_id`), scoped to the role when there are several."""
    role: str | None = None
    """The role whose tasks these are, in a deployment of several (None: the only one, no filter anywhere)."""
    role_name: str = "default"
    """The role's name, also with one role (what usage rows and metrics name)."""
    checkpoints: RunCheckpoints | None = None
    """The tasks' checkpoints (`store/run_checkpoints.py`); None: none is kept, no task resumes."""
    resume_attempts: int = 0
    """How many times a task whose holder stopped goes on from its checkpoint (RESUME_ATTEMPTS)."""

    @property
    def replica_id(self) -> str:
        """Who this process is to leases and control messages (a replica, or the admin command line)."""
        return self.leases.replica_id
