"""What every binding renders errors with, in one place: the v1.0 `google.rpc.ErrorInfo`, a JSON-RPC error
object, the v0.3 REST error body, a `google.rpc.Status` body, the headers an error adds to an HTTP answer
(`Retry-After`), and the media type an answer goes out in.

Each binding still has its one place that turns an exception into its shape (docs/ARCHITECTURE.md, "Errors
carry their codes"); they build it from these, so no binding imports another's private pieces.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request, Response

from app.protocol import errors
from app.protocol.errors import A2AError, RateLimitedError, UnavailableError

ERROR_DOMAIN = "a2a-protocol.org"
A2A_JSON = "application/a2a+json"


def error_info(err: A2AError) -> dict[str, Any]:
    """The google.rpc.ErrorInfo v1.0 attaches to every error."""
    info: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": err.reason,
        "domain": ERROR_DOMAIN,
    }
    if isinstance(err.data, dict) and err.data:
        info["metadata"] = {str(k): str(v) for k, v in err.data.items()}
    return info


def http_headers(err: A2AError) -> dict[str, str]:
    """Headers an error adds to its HTTP response: `Retry-After` for a rate limit or an unavailable
    database."""
    retryable = isinstance(err, RateLimitedError | UnavailableError)
    if retryable and isinstance(err.data, dict) and "retryAfter" in err.data:
        return {"Retry-After": str(err.data["retryAfter"])}
    return {}


def jsonrpc_error(rid: Any, err: A2AError, v10: bool) -> dict[str, Any]:
    """A JSON-RPC response object carrying `err` (v1.0: its ErrorInfo as `data`; v0.3: its own data)."""
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if v10:
        body["data"] = [error_info(err)]
    elif err.data is not None:
        body["data"] = err.data
    return {"jsonrpc": "2.0", "id": rid, "error": body}


def error_name(err: A2AError) -> str:
    """The spec's name of the error: its nearest class among the A2A errors."""
    for cls in type(err).__mro__:
        if cls.__module__ == errors.__name__:
            return cls.__name__
    return "InternalError"


def rest_error(err: A2AError, status: int | None = None) -> Response:
    """The v0.3 REST error body both official 0.3 clients read: `code`, `type`, `message`.

    The Python client maps `type` to its error class, the JavaScript client maps `code`; `status` overrides
    the HTTP status (the v0.3 binding uses the a2a-python 0.3 table, the aliases the v1.0.1 one).
    """
    body = {"code": err.code, "type": error_name(err), "message": err.message}
    return Response(
        orjson.dumps(body),
        status_code=status or err.http_status,
        media_type="application/json",
        headers=http_headers(err),
    )


def status_error(request: Request, err: A2AError) -> Response:
    """A `google.rpc.Status` error body with the error's HTTP status and its ErrorInfo."""
    body = {
        "error": {
            "code": err.http_status,
            "status": err.grpc_status,
            "message": err.message,
            "details": [error_info(err)],
        }
    }
    return Response(
        orjson.dumps(body),
        status_code=err.http_status,
        media_type=response_media(request),
        headers=http_headers(err),
    )


def media_type(header: str | None) -> str:
    """A Content-Type or Accept item without its parameters, lower case."""
    return (header or "").split(";")[0].strip().lower()


def response_media(request: Request) -> str:
    """`application/a2a+json` for a client that names it in `Accept` or sent its body as it; plain
    `application/json` for every other, which is what generic clients and tools expect (§11.1: SHOULD)."""
    if media_type(request.headers.get("content-type")) == A2A_JSON:
        return A2A_JSON
    for item in request.headers.get("accept", "").split(","):
        kind, *params = item.split(";")
        if kind.strip().lower() == A2A_JSON and not any(_q_zero(p) for p in params):
            return A2A_JSON
    return "application/json"


def _q_zero(param: str) -> bool:
    """Whether an Accept parameter is `q=0`, which refuses the type it follows."""
    key, _, value = param.partition("=")
    try:
        return key.strip().lower() == "q" and float(value) == 0
    except ValueError:
        return False
