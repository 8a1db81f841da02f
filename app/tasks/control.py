"""Control between replicas: a write to a task another replica holds is forwarded to it, and the
requests other replicas forward here are carried out (cancel, an answer to a waiting task, a new webhook,
and "the task you run was ended or taken over here": `lost`, which stops the run).

`hops` stops forwarding loops: a forwarded request that finds the task held elsewhere again fails.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.protocol import errors
from app.protocol.errors import (
    A2AError,
    DatabaseUnavailableError,
    InternalError,
    InvalidParamsError,
    UnavailableError,
)
from app.protocol.model import Message
from app.store.idempotency import IdemKey
from app.store.outage import is_unavailable
from app.store.writer import DuplicateError

from .live import LiveTasks
from .step import WORKER_PREFIX

log = logging.getLogger(__name__)

CONTROL_TIMEOUT_S = 5.0


class UnreachableHolderError(UnavailableError):
    """The replica holding the task did not answer a forwarded request (dead, cut off, Redis restarting,
    or not on this bus): the request was not carried out, and may be sent again (503, `Retry-After`)."""


class Control:
    """Forwards writes to the lease holder and serves the ones forwarded here (`cancel`, `answer`)."""

    def __init__(
        self,
        tasks: LiveTasks,
        cancel: Callable[[str, str, int, str | None], Awaitable[object]],
        answer: Callable[[str, Message, int, IdemKey | None], Awaitable[object]],
        lost: Callable[[str], object],
    ) -> None:
        self._bus = tasks.parts.bus
        self._tasks = tasks
        self._leases = tasks.parts.leases
        self._cancel = cancel
        self._answer = answer
        self._lost = lost
        self._role = tasks.parts.role
        self._bus.on_control(self.handle, self._role)

    async def forward(self, replica_id: str, body: dict[str, Any]) -> None:
        """Have the replica holding the task do the write; its A2A error becomes ours."""
        if self._role is not None:
            body = {**body, "role": self._role}
        try:
            reply = await self._bus.request(replica_id, body, CONTROL_TIMEOUT_S)
        except TimeoutError:
            raise UnreachableHolderError(f"Replica {replica_id} running the task did not answer") from None
        if reply.get("duplicate"):
            raise DuplicateError(f"a copy of this request was stored first on replica {replica_id}")
        err = reply.get("error")
        if err:
            cls = getattr(errors, err.get("type", ""), None)
            if not (isinstance(cls, type) and issubclass(cls, A2AError)):
                cls = InternalError
            raise cls(err.get("message"), err.get("data"))

    async def forward_answer(
        self, replica_id: str, owner: str, message: Message, idem: IdemKey | None
    ) -> None:
        """An answer to a task the replica `replica_id` holds, with the request's Idempotency-Key, which the
        holder stores in the answer's own transaction (so a copy that comes after the answer finds it)."""
        body: dict[str, Any] = {"op": "answer", "owner": owner, "message": message.to_store()}
        if idem is not None:
            body["idem"] = {"key": idem.key, "fingerprint": idem.fingerprint}
        await self.forward(replica_id, body)

    async def webhook_added(self, owner: str, task_id: str) -> None:
        """Tell the task's writer, here or elsewhere, that its events now also go to the push outbox."""
        live = self._tasks.get(task_id)
        if live is not None:
            live.push = True
            return
        holder = await self._leases.holder(task_id, owner=owner)
        # A remote worker's events are written by replicas, which read the task's webhooks as they write.
        here = self._leases.replica_id
        if holder is not None and holder != here and not holder.startswith(WORKER_PREFIX):
            try:
                body = {"op": "push", "task": task_id, "role": self._role}
                await self._bus.request(holder, body, CONTROL_TIMEOUT_S)
            except TimeoutError:
                log.warning("replica %s did not hear of task %s's new webhook", holder, task_id)

    async def handle(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request from another replica about a task this one holds."""
        try:
            if body.get("op") == "cancel":
                await self._cancel(body["owner"], body["task"], 1, body.get("reason"))
            elif body.get("op") == "push":
                live = self._tasks.get(body["task"])
                if live is not None:
                    live.push = True
            elif body.get("op") == "lost":
                self._lost(body["task"])
            elif body.get("op") == "answer":
                idem = IdemKey(**body["idem"]) if body.get("idem") else None
                await self._answer(body["owner"], Message.from_store(body["message"]), 1, idem)
            else:
                raise InvalidParamsError(f"unknown control op {body.get('op')!r}")
        except A2AError as err:
            return {"error": {"type": type(err).__name__, "message": err.message, "data": err.data}}
        except DuplicateError:
            return {"duplicate": True}
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            err = DatabaseUnavailableError()
            return {"error": {"type": type(err).__name__, "message": err.message, "data": err.data}}
        return {"ok": True}
