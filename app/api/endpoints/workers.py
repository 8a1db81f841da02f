"""The worker endpoints, `/workers/v1/...`: what a remote worker (`a2a-server worker`) calls, over plain
HTTP+JSON that passes any proxy. Only a worker credential is admitted here (`auth_guard.Guard`), and a worker
credential nowhere else. The protocol (docs/teams.md "Remote workers"):

- `POST /workers/v1/claim` `{role, instance, limit, waitS}` → `{tasks: [{task, owner, lastSeq}]}`
- `POST /workers/v1/tasks/{id}/events` `{role, instance, after, events: [{kind, body}]}` → `{lastSeq}`;
  409 `{error: {code: "lost"}}` once the task is not the worker's any more
- `POST /workers/v1/sync` `{role, instance, tasks: {id: {seq, user}}, waitS}` → `{news: {id: {...}}}`
- `GET /workers/v1/tasks/{id}?role=&instance=` → `{lastSeq, holder}`
- `POST /workers/v1/contexts` `{role, instance, contexts: [[owner, contextId]]}` → `{contexts: [[owner,
  contextId, open, lastStatusAt]]}`: of those, the contexts with tasks of the role left, how many have not
  ended and the time of the last status (the worker's workspace sweep, `agents/cli/sweep.py`)
- `GET /workers/v1/whoami?role=&instance=` → `{holder, leaseTtlS, heartbeatS, checkpointMaxBytes}` (a
  worker's first call: a worker that left is listed again by its next claim or sync, which it makes at
  least every `heartbeatS` to stay listed in discovery); `POST /workers/v1/release` `{role, instance, tasks,
  leaving}` gives leases up (`leaving`: the worker stops, out of the listing at once)
- `POST /workers/v1/tasks/{id}/calls` `{role, instance, op, args}`: the run's calls to other agents
  (`worker_calls.py`)
- `PUT|GET /workers/v1/tasks/{id}/checkpoint?role=&instance=`: the run's checkpoint (`worker_checkpoints.py`)
- `POST /workers/v1/tasks/{id}/requeue` `{role, instance, reason}` → `{handedOn, why?}`: a worker shutting
  down hands a working task whose run saved a checkpoint back to the queue (`tasks/resume.py`); 409 `lost`
  once the task is not the worker's

Errors are `{error: {code, message}}`: 400 for a body that does not parse, 404 for an unknown role.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.tasks.workers import WorkerDesk, WorkerLostError, holder_of

from ..deps import Components, components
from ..edge.auth import PRINCIPAL_KEY

router = APIRouter(prefix="/workers/v1")

INSTANCE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
QUERY_CHUNK = 200
"""Most contexts one `/contexts` call asks about (the sweep's chunk)."""


class _Ask(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(min_length=1, max_length=40)
    instance: str = Field(pattern=INSTANCE.pattern)


class _Load(_Ask):
    """A worker's load, for discovery: its slots and the agents it runs now."""

    slots: int | None = Field(default=None, ge=0, le=10_000)
    running: int | None = Field(default=None, ge=0, le=10_000)


class _Claim(_Load):
    limit: int = Field(ge=1, le=256)
    wait_s: float = Field(default=0.0, ge=0, alias="waitS")


class _Events(_Ask):
    after: int = Field(ge=1)
    events: list[dict[str, Any]] = Field(max_length=10_000)


class _Sync(_Load):
    tasks: dict[str, int | dict[str, Any]] = Field(default_factory=dict, max_length=1024)
    wait_s: float = Field(default=0.0, ge=0, alias="waitS")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": {"code": code, "message": message}}, status)


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


A = TypeVar("A", bound=_Ask)


async def _open(request: Request, model: type[A], query: bool = False) -> tuple[A, WorkerDesk, str]:
    """The call's request (the JSON body, or the query), the role's desk and the worker's lease holder name
    (from the credential's principal); `_Refused` with the answer when the request is bad or the role
    unknown."""
    try:
        raw = dict(request.query_params) if query else orjson.loads(await request.body())
        ask = model.model_validate(raw)
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise _Refused(_error(400, "invalid", f"Invalid request: {str(exc).splitlines()[0]}")) from None
    c: Components = components(request)
    role = c.roles.get(ask.role) if c.roles else (c if ask.role == c.role else None)
    if role is None or role.workers is None:
        raise _Refused(_error(404, "unknown_role", f"No role {ask.role!r} here"))
    return ask, role.workers, holder_of(request.scope[PRINCIPAL_KEY].name, ask.instance)


async def _seen(desk: WorkerDesk, holder: str, load: _Load) -> None:
    """A call that carries the worker's load (a claim, a sync) keeps it listed in discovery with that load."""
    if desk.announce is not None:
        await desk.announce.seen(holder, load.slots, load.running)


def _answers(
    endpoint: Callable[..., Awaitable[Response]],
) -> Callable[..., Awaitable[Response]]:
    """The endpoint, with a refused request answered (400, 404) instead of raised."""

    @functools.wraps(endpoint)
    async def answer(*args: Any, **kwargs: Any) -> Response:
        try:
            return await endpoint(*args, **kwargs)
        except _Refused as refused:
            return refused.response

    return answer


@router.post("/claim")
@_answers
async def claim(request: Request) -> Response:
    ask, desk, holder = await _open(request, _Claim)
    await _seen(desk, holder, ask)
    claimed = await desk.claim(holder, ask.limit, ask.wait_s)
    return _json({"tasks": [c.to_wire() for c in claimed]})


@router.post("/tasks/{task_id}/events")
@_answers
async def events(task_id: str, request: Request) -> Response:
    ask, desk, holder = await _open(request, _Events)
    try:
        last_seq = await desk.record(holder, task_id, ask.after, ask.events)
    except WorkerLostError:
        return _error(409, "lost", f"Task {task_id} is no longer this worker's")
    except (KeyError, ValueError, TypeError) as exc:
        return _error(400, "invalid", f"Invalid events: {type(exc).__name__}: {exc}")
    return _json({"lastSeq": last_seq})


@router.post("/sync")
@_answers
async def sync(request: Request) -> Response:
    ask, desk, holder = await _open(request, _Sync)
    await _seen(desk, holder, ask)
    return _json({"news": await desk.sync(holder, ask.tasks, ask.wait_s)})


class _Release(_Ask):
    tasks: list[str] = Field(default_factory=list, max_length=1024)
    leaving: bool = False
    """The worker is stopping: it leaves discovery at once."""


class _Contexts(_Ask):
    contexts: list[tuple[str, str]] = Field(max_length=QUERY_CHUNK)


@router.post("/contexts")
@_answers
async def contexts(request: Request) -> Response:
    """What the store says of the contexts whose workspaces are on the worker's disk (its sweep's
    question): only the role's tasks count."""
    ask, desk, _ = await _open(request, _Contexts)
    if desk.contexts is None:
        return _error(404, "unknown_role", f"No role {ask.role!r} here")
    found = await desk.contexts(ask.contexts)
    return _json({"contexts": [[o, c, n, at] for (o, c), (n, at) in sorted(found.items())]})


@router.get("/whoami")
@_answers
async def whoami(request: Request) -> Response:
    """The worker's lease holder name, the lease TTL it must renew within, how often it must call to stay
    listed in discovery, and the largest checkpoint archive the server keeps (None: it keeps none)."""
    _, desk, holder = await _open(request, _Ask, query=True)
    if desk.announce is not None:
        await desk.announce.hello(holder)
    heartbeat = desk.announce.every_s if desk.announce is not None else None
    most = desk.checkpoints.max_bytes if desk.checkpoints is not None else None
    return _json(
        {"holder": holder, "leaseTtlS": desk.ttl_s, "heartbeatS": heartbeat, "checkpointMaxBytes": most}
    )


@router.post("/release")
@_answers
async def release(request: Request) -> Response:
    """Give up leases (a worker stopping): waiting tasks are answerable by anyone, queued ones claimable."""
    ask, desk, holder = await _open(request, _Release)
    await desk.release(holder, ask.tasks)
    if ask.leaving and desk.announce is not None:
        await desk.announce.gone(holder)
    return _json({})


class _HandOn(_Ask):
    reason: str = Field(min_length=1, max_length=2000)
    """What happened to the worker ("Worker box:vm1 shut down while this task was running.")."""


@router.post("/tasks/{task_id}/requeue")
@_answers
async def requeue(task_id: str, request: Request) -> Response:
    """The worker shut down cleanly and its run saved a checkpoint: the task goes back to the queue to go
    on elsewhere, if it has a checkpoint and attempts left (`{handedOn: true}`), else `{handedOn: false,
    why}` and the worker fails it with that reason."""
    ask, desk, holder = await _open(request, _HandOn)
    try:
        why = await desk.hand_on(holder, task_id, ask.reason)
    except WorkerLostError:
        return _error(409, "lost", f"Task {task_id} is not working at this worker")
    return _json({"handedOn": True} if why is None else {"handedOn": False, "why": why})


@router.get("/tasks/{task_id}")
@_answers
async def task_lease(task_id: str, request: Request) -> Response:
    _, desk, holder = await _open(request, _Ask, query=True)
    recorded = await desk.recorded(holder, task_id)
    if recorded is None:
        return _error(404, "not_found", f"No task {task_id}")
    return _json({"lastSeq": recorded[0], "holder": recorded[1]})
