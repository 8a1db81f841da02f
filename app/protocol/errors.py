"""A2A errors: each carries every code a binding answers it with, so no binding keeps a table of its own.

- `code`: the JSON-RPC error code (both versions);
- `http_status`: the HTTP status of the v1.0.1 HTTP+JSON binding ([S1.0.1] §5.4), also used by the
  `/a2a/tasks` aliases and for refusals before any route;
- `rest_v03_status`: the HTTP status of the v0.3 HTTP+JSON binding, as a2a-python 0.3's REST error handler
  answers it (PROTOCOL-NOTES §4.2);
- `grpc_status`: the `google.rpc` status name in a v1.0 `google.rpc.Status` body;
- `reason`: the v1.0 `google.rpc.ErrorInfo` reason.

A subclass that changes `http_status` sets `rest_v03_status` too. Raised anywhere below `api/`; only `api/`
turns them into wire errors. The message is always written for the client: internals never go into it.
"""

from __future__ import annotations

from typing import Any, ClassVar


class A2AError(Exception):
    code: ClassVar[int] = -32603
    http_status: ClassVar[int] = 500
    rest_v03_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    reason: ClassVar[str] = "INTERNAL"
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, data: Any = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)


class JSONParseError(A2AError):
    code = -32700
    http_status = 400
    rest_v03_status = 400
    grpc_status = "INVALID_ARGUMENT"
    reason = "PARSE_ERROR"
    default_message = "Invalid JSON payload"


class InvalidRequestError(A2AError):
    code = -32600
    http_status = 400
    rest_v03_status = 400
    grpc_status = "INVALID_ARGUMENT"
    reason = "INVALID_REQUEST"
    default_message = "Request payload validation error"


class MethodNotFoundError(A2AError):
    code = -32601
    http_status = 404
    rest_v03_status = 404
    grpc_status = "NOT_FOUND"
    reason = "METHOD_NOT_FOUND"
    default_message = "Method not found"


class InvalidParamsError(A2AError):
    code = -32602
    http_status = 400
    rest_v03_status = 422
    grpc_status = "INVALID_ARGUMENT"
    reason = "INVALID_PARAMS"
    default_message = "Invalid parameters"


class ContextBusyError(InvalidParamsError):
    """A new task in a context whose other task of an agent with effects is still open (one workspace,
    one CLI session per context): continue that task, wait for it to end, or cancel it."""

    default_message = "Another task of this context is still open"


class InternalError(A2AError):
    pass


class TaskNotFoundError(A2AError):
    code = -32001
    http_status = 404
    rest_v03_status = 404
    grpc_status = "NOT_FOUND"
    reason = "TASK_NOT_FOUND"
    default_message = "Task not found"


class TaskNotCancelableError(A2AError):
    code = -32002
    http_status = 400
    rest_v03_status = 409
    grpc_status = "FAILED_PRECONDITION"
    reason = "TASK_NOT_CANCELABLE"
    default_message = "Task cannot be canceled"


class PushNotificationNotSupportedError(A2AError):
    code = -32003
    http_status = 400
    rest_v03_status = 501
    grpc_status = "FAILED_PRECONDITION"
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    default_message = "Push Notification is not supported"


class UnsupportedOperationError(A2AError):
    code = -32004
    http_status = 400
    rest_v03_status = 501
    grpc_status = "FAILED_PRECONDITION"
    reason = "UNSUPPORTED_OPERATION"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(A2AError):
    code = -32005
    http_status = 400
    rest_v03_status = 415
    grpc_status = "INVALID_ARGUMENT"
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    default_message = "Incompatible content types"


class InvalidAgentResponseError(A2AError):
    code = -32006
    http_status = 500
    rest_v03_status = 502
    grpc_status = "INTERNAL"
    reason = "INVALID_AGENT_RESPONSE"
    default_message = "Invalid agent response"


class ExtendedAgentCardNotConfiguredError(A2AError):
    code = -32007
    http_status = 400
    rest_v03_status = 404
    grpc_status = "FAILED_PRECONDITION"
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    default_message = "Authenticated Extended Card is not configured"


class ExtensionSupportRequiredError(A2AError):
    code = -32008
    http_status = 400
    rest_v03_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "EXTENSION_SUPPORT_REQUIRED"
    default_message = "A required extension was not declared by the client"


class VersionNotSupportedError(A2AError):
    code = -32009
    http_status = 400
    rest_v03_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "VERSION_NOT_SUPPORTED"
    default_message = "This protocol version is not supported"


# ---- access and limits: server-defined codes in -32000..-32099 (docs/operations.md "Authentication") ----


class UnauthenticatedError(A2AError):
    """No credential, or one that does not verify: HTTP 401 with `WWW-Authenticate`."""

    code = -32090
    http_status = 401
    rest_v03_status = 401
    grpc_status = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"
    default_message = "Authentication required"


class PermissionDeniedError(A2AError):
    """A valid principal without a scope this server requires: HTTP 403."""

    code = -32091
    http_status = 403
    rest_v03_status = 403
    grpc_status = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"
    default_message = "The credential lacks a required scope"


class RateLimitedError(A2AError):
    """Too many new tasks from one principal: HTTP 429 with `Retry-After` (seconds in data)."""

    code = -32092
    http_status = 429
    rest_v03_status = 429
    grpc_status = "RESOURCE_EXHAUSTED"
    reason = "RATE_LIMITED"
    default_message = "Too many tasks created; retry later"


class PayloadTooLargeError(A2AError):
    code = -32093
    http_status = 413
    rest_v03_status = 413
    grpc_status = "INVALID_ARGUMENT"
    reason = "PAYLOAD_TOO_LARGE"
    default_message = "Request body too large"


class TooManyStreamsError(A2AError):
    """The principal already holds as many open streams as this replica allows: HTTP 429."""

    code = -32094
    http_status = 429
    rest_v03_status = 429
    grpc_status = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_STREAMS"
    default_message = "Too many open streams"


class UnavailableError(A2AError):
    """A part the request needs is away for a moment (the database, the replica holding the task): HTTP 503
    with `Retry-After`, gRPC UNAVAILABLE; the JSON-RPC code stays the spec's internal error, the message
    names the cause. Nothing was carried out: the same request may be sent again."""

    code = -32603
    http_status = 503
    rest_v03_status = 503
    grpc_status = "UNAVAILABLE"
    reason = "UNAVAILABLE"
    default_message = "A part of the service is unreachable right now; retry in a few seconds"
    retry_after_s = 5

    def __init__(self, message: str | None = None, data: object = None) -> None:
        super().__init__(message, data if data is not None else {"retryAfter": self.retry_after_s})


class DatabaseUnavailableError(UnavailableError):
    """The task store cannot be reached (a restart, an outage): an `UnavailableError` naming the database."""

    default_message = "The task database is unreachable right now; retry in a few seconds"
