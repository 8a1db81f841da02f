"""A local OTLP/HTTP traces receiver for tests: a threaded HTTP server on loopback that takes
`POST /v1/traces` (protobuf `ExportTraceServiceRequest`, as the OpenTelemetry exporter sends it), decodes it
with opentelemetry-proto and keeps every span. Point servers at it with `env()`
(`OTEL_EXPORTER_OTLP_ENDPOINT`, and a short batch delay so spans arrive within a fraction of a second)."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.loopback import Loopback, QuietHandler

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass(slots=True)
class Span:
    """One span as it arrived: ids as hex, its resource's and its own attributes."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)
    status: int = 0
    """0 unset, 1 ok, 2 error."""

    @property
    def replica(self) -> str:
        return str(self.resource.get("service.instance.id", ""))


class OtlpReceiver(Loopback):
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                request = ExportTraceServiceRequest.FromString(raw)
                with receiver._lock:
                    receiver.requests += 1
                    receiver.spans.extend(_spans(request))
                self.reply(ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

        super().__init__(Handler)

    def env(self) -> dict[str, str]:
        """What a server needs to export its spans here, within a fraction of a second of ending them."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def found(self, test: Callable[[Span], bool]) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if test(s)]

    async def until(self, test: Callable[[list[Span]], bool], timeout: float = 30.0) -> list[Span]:
        """Every span so far, once `test` of them holds (polls; TimeoutError naming what arrived)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    with self._lock:
                        spans = list(self.spans)
                    if test(spans):
                        return spans
                    await asyncio.sleep(0.1)
        except TimeoutError:
            names = sorted({(s.replica, s.name) for s in self.spans})
            raise TimeoutError(f"the spans never matched; received: {names}") from None


def _spans(request: ExportTraceServiceRequest) -> list[Span]:
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        kind=KINDS.get(s.kind, str(s.kind)),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        resource=resource,
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        status=s.status.code,
                    )
                )
    return out
