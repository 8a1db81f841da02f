"""The request's log fields and span: an ASGI layer outside everything but the slash stripping.

Every HTTP request starts its own log context fields (`telemetry.logs.scope`; the guard adds the principal,
`Call` the role, the task service the task and context ids), so each record logged for it, uvicorn's access
line included, carries them. With tracing on it also runs in a server span, the child of the caller's W3C
`traceparent` when it sends one, named by method and route (`POST /a2a/jsonrpc`, `GET /v1/tasks/{id}`),
with the status code; a stream's span lasts as long as the stream. Health checks and
metrics scrapes make no spans. With tracing off that is one attribute read.
"""

from __future__ import annotations

import re

from starlette.types import Message, Receive, Scope, Send

from app.telemetry import logs, traces

from ..paths import OPS_PATHS, route_path
from .asgi import HttpLayer

UNTRACED = OPS_PATHS
"""Probes and scrapes: a trace each every few seconds would bury the traces that matter."""


class Observe(HttpLayer):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        logs.scope()
        if not traces.ENABLED or route_path(scope["path"]) in UNTRACED:
            await self.app(scope, receive, send)
            return
        await self._traced(scope, receive, send)

    async def _traced(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        path = scope["path"]
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k in (b"traceparent", b"tracestate")
        }
        span = traces.start(
            f"{method} {_template(scope)}",
            headers=carrier,
            kind=traces.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        )
        status = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            with traces.current(span):
                await self.app(scope, receive, sent)
        except BaseException as exc:
            traces.failed(span, exc)
            raise
        finally:
            route = _template(scope)
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
            if status:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    traces.error(span, f"HTTP {status}")
            span.end()


_IDS = re.compile(r"(/tasks/|/pushNotificationConfigs/)[^/:]+")


def _template(scope: Scope) -> str:
    """The route as a low-cardinality span name: FastAPI's template where it matched one of its own routes,
    else the path (without a role's prefix) with task and webhook ids as `{id}`."""
    route = getattr(scope.get("route"), "path", None)
    if route:
        return route
    return _IDS.sub(r"\1{id}", route_path(scope["path"]))
