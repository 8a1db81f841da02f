"""A run's checkpoint store on a replica (`TaskContext.checkpoints`): the database's `task_checkpoints`
(`store/run_checkpoints.py`) bound to the run's task, its owner and this holder, with the store's refusals
turned into the agents' `CheckpointError`. A remote worker's runs get theirs over the worker endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.agents.checkpoints import Checkpoint, CheckpointError
from app.store.run_checkpoints import CheckpointRefusedError

if TYPE_CHECKING:
    from app.store.run_checkpoints import RunCheckpoints


class TaskCheckpoints:
    """One task's checkpoint, as its run on this replica saves and reads it."""

    def __init__(self, store: RunCheckpoints, task_id: str, owner: str, holder: str) -> None:
        self._store = store
        self._task_id = task_id
        self._owner = owner
        self._holder = holder
        self.max_bytes = store.max_bytes

    async def save(self, data: bytes, manifest: dict[str, Any]) -> None:
        try:
            await self._store.save(self._task_id, self._owner, data, manifest, self._holder)
        except CheckpointRefusedError as exc:
            raise CheckpointError(str(exc)) from None

    async def load(self) -> Checkpoint | None:
        try:
            stored = await self._store.load(self._task_id, self._owner)
        except CheckpointRefusedError as exc:
            raise CheckpointError(str(exc)) from None
        if stored is None:
            return None
        return Checkpoint(stored.data, stored.manifest, stored.taken_at, stored.holder)
