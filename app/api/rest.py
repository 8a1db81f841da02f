"""REST aliases for reads: `GET /a2a/tasks/{taskId}` answers the v0.3 Task, as the seed documents do."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request, Response

from app.protocol import v03
from app.protocol.errors import A2AError, InvalidParamsError

from .deps import components, owner_of

router = APIRouter()


def rest_error(err: A2AError) -> Response:
    """The v0.3 REST error body both official 0.3 clients read: `code`, `type`, `message`."""
    body = {"code": err.code, "type": type(err).__name__, "message": err.message}
    return Response(orjson.dumps(body), status_code=err.http_status, media_type="application/json")


@router.get("/a2a/tasks/{task_id}", include_in_schema=False)
async def get_task(task_id: str, request: Request) -> Response:
    try:
        raw = request.query_params.get("historyLength")
        history_length = None
        if raw is not None:
            if not raw.isdigit():
                raise InvalidParamsError("historyLength must be a non-negative integer")
            history_length = int(raw)
        task = await components(request).service.get(owner_of(request), task_id)
    except A2AError as err:
        return rest_error(err)
    body = orjson.dumps(v03.encode_task(task, history_length))
    return Response(body, media_type="application/json")
