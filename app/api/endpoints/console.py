"""The web console at `/console`: its page and assets (public, like the card), and the reads it needs
that the task API does not offer (`/console/api/...`, authenticated like the API).

The page does everything else through the same A2A v1.0 JSON-RPC endpoints any client uses (send, answer,
cancel, subscribe with `Last-Event-ID`), with the credential the person typed in, so it sees and may do
exactly what that principal may. The reads here cross roles (a team's tasks in one list), never owners,
except for the principals in `CONSOLE_ADMINS`, who may list and open every owner's tasks.

Every answer carries a strict Content-Security-Policy: scripts and styles from this origin only (no inline
script, no `eval`), calls to this origin only, nothing framed. Agent output is rendered by the page as
text (`app/console/render.js`), never as HTML. No cookie is set: the credential lives in the tab's session
storage and goes out as an `Authorization` header, so there is nothing for another site to ride on.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import protojson_v10
from app.protocol.errors import A2AError, InvalidParamsError, TaskNotFoundError
from app.protocol.model import DEPTH_KEY, PATH_KEY, TaskState, parse_iso
from app.protocol.task_options import MODEL_KEY, SKILL_KEY
from app.store.browse import BadCursor, Browse, Filters, TaskLine, TreeNode

from ..deps import components, owner_of
from ..edge.auth import PRINCIPAL_KEY
from ..errors import status_error
from ..faults import unexpected
from ..paths import CONSOLE_API, CONSOLE_PATH

router = APIRouter(include_in_schema=False)

PREFIX = CONSOLE_PATH
ASSETS = f"{PREFIX}/assets/"
API = CONSOLE_API
PAGE_LIMIT = 100
"""Most tasks one list call answers."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str


def _load_assets() -> dict[str, Asset]:
    """The page's files, read once from the package (`app/console/`): no build step, nothing at run time."""
    folder = resources.files("app") / "console"
    out: dict[str, Asset] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in MEDIA_TYPES:
            out[entry.name] = Asset(entry.read_bytes(), MEDIA_TYPES[suffix])
    return out


_ASSETS = _load_assets()


def _secured(resp: Response) -> Response:
    resp.headers.update(SECURITY_HEADERS)
    return resp


def _json(body: Any, status: int = 200) -> Response:
    resp = Response(orjson.dumps(body), status, media_type="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return _secured(resp)


def _error(request: Request, exc: Exception, where: str) -> Response:
    """`exc` as a `google.rpc.Status` answer (an A2A error as it is; anything else through `unexpected`)."""
    err = exc if isinstance(exc, A2AError) else unexpected(exc, where)
    return _secured(status_error(request, err))


@router.get(f"{ASSETS}{{name}}")
async def asset(name: str) -> Response:
    found = _ASSETS.get(name)
    if found is None or name == "index.html":
        return _secured(Response(b"not found", 404, media_type="text/plain"))
    resp = Response(found.body, media_type=found.media_type)
    resp.headers["Cache-Control"] = "no-cache"
    return _secured(resp)


@router.get(PREFIX)
@router.get(f"{PREFIX}/tasks/{{rest:path}}")
@router.get(f"{PREFIX}/agents")
@router.get(f"{PREFIX}/new")
@router.get(f"{PREFIX}/usage")
async def page() -> Response:
    """The one page; the path (a task's id in `/console/tasks/<id>`) picks the view, so links are deep."""
    resp = Response(_ASSETS["index.html"].body, media_type=MEDIA_TYPES[".html"])
    resp.headers["Cache-Control"] = "no-cache"
    return _secured(resp)


def _admin(request: Request) -> bool:
    principal = request.scope.get(PRINCIPAL_KEY)
    return principal is not None and principal.name in components(request).console_admins


def _roles(request: Request) -> list[dict[str, Any]]:
    """Every role this deployment serves, where its A2A endpoints are (`/agents/{role}`, the default role's
    too: the root is only its alias), whether it is the default one, and the extensions its card requires."""
    c = components(request)
    roles = c.roles or {c.role: c}
    return [
        {
            "name": name,
            "path": f"/agents/{name}",
            "default": i == 0,
            # The page names these in every A2A call it makes to the role (A2A-Extensions).
            "requiredExtensions": list(role.card.extensions.required),
        }
        for i, (name, role) in enumerate(roles.items())
    ]


@router.get(f"{API}me")
async def me(request: Request) -> Response:
    """Who the credential is, whether they see everyone, and the roles to send to."""
    return _json(
        {
            "principal": owner_of(request),
            "admin": _admin(request),
            "authenticated": not request.app.state.authenticator.off,
            "roles": _roles(request),
        }
    )


def _scope(request: Request) -> str | None:
    """The owner whose tasks this call reads: the caller's own; an admin may name another or `*` (all)."""
    owner = owner_of(request)
    asked = request.query_params.get("owner")
    if asked is None or asked == owner:
        return owner
    if not _admin(request):
        raise TaskNotFoundError("Only a console admin may read another principal's tasks")
    return None if asked == "*" else asked


def _state(value: str | None) -> TaskState | None:
    if not value:
        return None
    state = protojson_v10.STATES_BY_NAME.get(value)
    if state is None:
        try:
            state = TaskState(value)
        except ValueError:
            raise InvalidParamsError(f"Unknown task state {value!r}") from None
    return state


def _time(value: str | None) -> str | None:
    if not value:
        return None
    try:
        parse_iso(value)
    except ValueError:
        raise InvalidParamsError("changedAfter must be an ISO-8601 time") from None
    return value


def _limit(value: str | None) -> int:
    if value is None:
        return 50
    if not value.isdigit() or not 1 <= int(value) <= PAGE_LIMIT:
        raise InvalidParamsError(f"limit must be a whole number from 1 to {PAGE_LIMIT}")
    return int(value)


def _text(metadata: dict[str, Any] | None, key: str) -> str | None:
    value = (metadata or {}).get(key)
    return value if isinstance(value, str) else None


def _line(line: TaskLine) -> dict[str, Any]:
    return {
        "id": line.id,
        "contextId": line.context_id,
        "owner": line.owner,
        "role": line.role,
        "state": protojson_v10.STATE_NAMES[TaskState(line.state)],
        "statusAt": line.status_at,
        "createdAt": line.created_at,
        "title": line.title,
        "usage": (line.metadata or {}).get("usage"),
        "parentTaskId": line.parent_task_id,
        "callDepth": (line.metadata or {}).get(DEPTH_KEY),
        "callPath": (line.metadata or {}).get(PATH_KEY),
        # What the task's first message asked for (routing by skill, its own model: `task_options.py`).
        "skill": _text(line.metadata, SKILL_KEY),
        "model": _text(line.metadata, MODEL_KEY),
    }


def _node(node: TreeNode) -> dict[str, Any]:
    return {**_line(node.line), "children": [_node(c) for c in node.children]}


@router.get(f"{API}tasks")
async def list_tasks(request: Request) -> Response:
    """A page of tasks across roles: `state`, `role`, `contextId`, `q` (text), `changedAfter`, `owner`
    (admins), `cursor`, `limit`; newest status first."""
    q = request.query_params
    try:
        filters = Filters(
            owner=_scope(request),
            state=_state(q.get("state")),
            role=q.get("role") or None,
            context_id=q.get("contextId") or None,
            text=(q.get("q") or "").strip()[:200] or None,
            changed_after=_time(q.get("changedAfter")),
        )
        page = await Browse(components(request).engine).page(
            filters, limit=_limit(q.get("limit")), cursor=q.get("cursor") or None
        )
    except BadCursor:
        return _error(request, InvalidParamsError("cursor is not one this server issued"), "")
    except Exception as exc:
        return _error(request, exc, "GET /console/api/tasks")
    return _json({"tasks": [_line(x) for x in page.lines], "nextCursor": page.next_cursor})


@router.get(f"{API}tasks/{{task_id}}")
async def get_task(request: Request, task_id: str) -> Response:
    """One task whole (v1.0 ProtoJSON, as `GetTask` answers), with its role, its owner and whether the
    caller owns it (only then may the page stream and steer it through A2A)."""
    try:
        owner = owner_of(request)
        scope = None if _admin(request) else owner
        found = await Browse(components(request).engine).task(task_id, scope)
        if found is None:
            raise TaskNotFoundError(f"Task {task_id} was not found")
    except Exception as exc:
        return _error(request, exc, "GET /console/api/tasks/{id}")
    stored, role = found
    path = next((r["path"] for r in _roles(request) if r["name"] == role), None)
    return _json(
        {
            "task": protojson_v10.encode_task(stored.task),
            "lastSeq": stored.last_seq,
            "role": role,
            "owner": stored.owner,
            "own": stored.owner == owner,
            "endpoint": None if path is None else f"{path}/a2a/jsonrpc",
        }
    )


@router.get(f"{API}tasks/{{task_id}}/tree")
async def task_tree(request: Request, task_id: str) -> Response:
    """Where the task stands among agents that called agents: the tasks above it (the root first, its
    parent last) and the tasks its run started, and theirs (each a list line with `children`)."""
    try:
        found = await Browse(components(request).engine).tree(
            task_id, None if _admin(request) else owner_of(request)
        )
        if found is None:
            raise TaskNotFoundError(f"Task {task_id} was not found")
    except Exception as exc:
        return _error(request, exc, "GET /console/api/tasks/{id}/tree")
    return _json(
        {
            "ancestors": [_line(x) for x in found.ancestors],
            "children": [_node(x) for x in found.children],
            "cut": found.cut,
        }
    )
