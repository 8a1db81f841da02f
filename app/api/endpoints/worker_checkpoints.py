"""A remote worker's runs' checkpoints: `PUT /workers/v1/tasks/{id}/checkpoint?role=&instance=` saves one,
`GET` (same query) reads it back; the worker's `RemoteCheckpoints` (`runner/remote_checkpoints.py`) calls
them.

The body, both ways, is `application/vnd.a2a.checkpoint`: the manifest as one line of JSON, a newline, the
archive (`tasks/worker_wire.py` `checkpoint_to_wire`). A GET's answer names who saved it and when
(`X-A2A-Checkpoint-Holder`, percent-encoded; `X-A2A-Checkpoint-Taken-At`, ISO 8601).

The worker credential reaches a task's checkpoint only while this worker instance holds the lease of the
running task (`WorkerDesk.running`, as for its calls): for any other task, another instance, another
principal's worker, or once the run has ended, 409 `not_held`, which says nothing of the task. The server
saves and reads it as the task's owner, with the worker as its holder (`runner/checkpoints.py`
`TaskCheckpoints`, as a replica's run's); the worker never names an owner.

Errors (`{error: {code, message}}`): an archive over CHECKPOINT_MAX_MB (or a manifest over 1 MiB) is 413
`too_large`, refused from its Content-Length before the body is read, and a body sent without one is read
only up to that bound (the edge's guard bounds it so too: `auth_guard.Guard`); a body that is not a
checkpoint is 400 `invalid`; one the store refuses is 422 `refused`; no checkpoint is 404 `no_checkpoint`;
a stored one that cannot be used (corrupt) is 422 `unusable` with the store's reason.
"""

from __future__ import annotations

from datetime import UTC
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.agents.checkpoints import CheckpointError, CheckpointStore
from app.runner.checkpoints import TaskCheckpoints
from app.tasks.worker_wire import (
    CHECKPOINT_TYPE,
    HOLDER_HEADER,
    MANIFEST_MAX_BYTES,
    TAKEN_AT_HEADER,
    checkpoint_body_max,
    checkpoint_from_wire,
    checkpoint_to_wire,
)

from .workers import _answers, _Ask, _error, _open, _Refused

router = APIRouter(prefix="/workers/v1")


async def _store(request: Request, task_id: str) -> CheckpointStore:
    """The task's checkpoint store, bound to its owner and this worker as the holder; `_Refused` unless this
    worker instance holds the running task."""
    _, desk, holder = await _open(request, _Ask, query=True)
    if desk.checkpoints is None:
        raise _Refused(_error(404, "no_checkpoints", "This server keeps no checkpoints"))
    running = await desk.running(holder, task_id)
    if running is None:
        raise _Refused(
            _error(
                409,
                "not_held",
                f"Task {task_id} is not running at this worker: a run's checkpoint is reached only while "
                "its worker holds its task",
            )
        )
    return TaskCheckpoints(desk.checkpoints, task_id, running[0], holder)


def _too_large(max_bytes: int) -> _Refused:
    return _Refused(
        _error(
            413,
            "too_large",
            f"The checkpoint is over the server's limit: an archive of at most {max_bytes} bytes "
            f"(CHECKPOINT_MAX_MB) and a manifest of at most {MANIFEST_MAX_BYTES} bytes",
        )
    )


async def _bounded(request: Request, limit: int, max_bytes: int) -> bytes:
    """The request's body, read only up to `limit` bytes (`_Refused` 413 past it), so a huge body is never
    held whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(max_bytes)
    return bytes(body)


@router.put("/tasks/{task_id}/checkpoint")
@_answers
async def save(task_id: str, request: Request) -> Response:
    """Replace the task's checkpoint with the body's, whole (idempotent: a retried save stores the same)."""
    store = await _store(request, task_id)
    body = await _bounded(request, checkpoint_body_max(store.max_bytes), store.max_bytes)
    try:
        manifest, data = checkpoint_from_wire(body)
    except ValueError as exc:
        return _error(400, "invalid", f"Invalid checkpoint: {exc}")
    if len(data) > store.max_bytes:
        raise _too_large(store.max_bytes)
    try:
        await store.save(data, manifest)
    except CheckpointError as exc:
        return _error(422, "refused", f"The checkpoint was not saved: {exc}")
    return Response(status_code=204)


@router.get("/tasks/{task_id}/checkpoint")
@_answers
async def load(task_id: str, request: Request) -> Response:
    """The task's checkpoint as its last holder saved it."""
    store = await _store(request, task_id)
    try:
        found = await store.load()
    except CheckpointError as exc:
        return _error(422, "unusable", f"The task's checkpoint cannot be used: {exc}")
    if found is None:
        return _error(404, "no_checkpoint", f"Task {task_id} has no checkpoint")
    taken_at = found.taken_at if found.taken_at.tzinfo else found.taken_at.replace(tzinfo=UTC)  # SQLite's
    headers = {HOLDER_HEADER: quote(found.holder, safe=":@"), TAKEN_AT_HEADER: taken_at.isoformat()}
    return Response(checkpoint_to_wire(found.data, found.manifest), 200, headers, media_type=CHECKPOINT_TYPE)
