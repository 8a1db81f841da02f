"""A remote worker's run's checkpoints (`RemoteCheckpoints`): the `CheckpointStore` a replica's run gets
(`agents/checkpoints.py`), kept by the server over the worker endpoints `PUT`/`GET
/workers/v1/tasks/{id}/checkpoint` (`api/endpoints/worker_checkpoints.py`), which store it as the task's
owner while this worker holds the task. The worker's runner makes one per run (`RunSetup.checkpoints`).

Both calls are retried while the server cannot answer (a replica restarting behind the load balancer): a
save replaces the task's checkpoint whole, so sending it twice stores it once. Whatever keeps a checkpoint
from being saved or read (too large, the task no longer this worker's, the server away past `RETRY_S`, a
corrupt one) is `CheckpointError` with the reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import unquote

import httpx

from app.agents.checkpoints import Checkpoint, CheckpointError
from app.tasks.worker_wire import (
    CHECKPOINT_TYPE,
    HOLDER_HEADER,
    TAKEN_AT_HEADER,
    checkpoint_from_wire,
    checkpoint_to_wire,
)

from .remote import Server, ServerError

RETRY_S = 60.0
"""How long a save or a load is retried while the server cannot answer."""


class RemoteCheckpoints:
    """The `CheckpointStore` of one run of the worker, bound to its task (module docstring)."""

    def __init__(self, server: Server, task_id: str, max_bytes: int) -> None:
        self._server = server
        self.task_id = task_id
        self.max_bytes = max_bytes
        """The server's CHECKPOINT_MAX_MB (its `whoami`), or the worker's own when lower."""

    @property
    def _path(self) -> str:
        return f"/workers/v1/tasks/{self.task_id}/checkpoint"

    async def save(self, data: bytes, manifest: dict[str, Any]) -> None:
        if len(data) > self.max_bytes:
            raise CheckpointError(
                f"The checkpoint's archive is {len(data)} bytes, over the limit of {self.max_bytes} "
                "(CHECKPOINT_MAX_MB)"
            )
        body = checkpoint_to_wire(data, manifest)
        resp = await self._send("PUT", body)
        if resp.status_code != 204:
            raise CheckpointError(f"The server did not save the checkpoint: {_reason(resp)}")

    async def load(self) -> Checkpoint | None:
        resp = await self._send("GET", None)
        if resp.status_code == 404 and _code(resp) == "no_checkpoint":
            return None
        if resp.status_code != 200:
            raise CheckpointError(f"The server gave no checkpoint: {_reason(resp)}")
        try:
            manifest, data = checkpoint_from_wire(resp.content)
            taken_at = datetime.fromisoformat(resp.headers[TAKEN_AT_HEADER])
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"The server's checkpoint does not parse: {exc}") from None
        return Checkpoint(data, manifest, taken_at, unquote(resp.headers.get(HOLDER_HEADER, "")))

    async def _send(self, method: str, body: bytes | None) -> httpx.Response:
        headers = {"Content-Type": CHECKPOINT_TYPE} if body is not None else None
        try:
            return await self._server.send(
                method, self._path, content=body, headers=headers, give_up_s=RETRY_S
            )
        except (TimeoutError, ServerError) as exc:
            raise CheckpointError(f"The server did not answer ({exc})") from None


def _error(resp: httpx.Response) -> dict[str, Any]:
    """The answer's `{error: {code, message}}` part; empty for a proxy's own page."""
    try:
        body = resp.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _code(resp: httpx.Response) -> str | None:
    return _error(resp).get("code")


def _reason(resp: httpx.Response) -> str:
    """The server's message for a refusal (a proxy's own page is named by its status alone)."""
    message = _error(resp).get("message")
    return f"HTTP {resp.status_code}: {message}" if message else f"HTTP {resp.status_code}"
