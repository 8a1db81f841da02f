"""Traces: OpenTelemetry spans, on when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`), free if not.

`setup` configures the SDK (a batch processor exporting OTLP/HTTP protobuf; the other `OTEL_*` variables the
SDK reads, such as headers, timeout, sampler and batch delay, apply as usual) and sets the global tracer
provider, which the agents' CLI span uses through the OpenTelemetry API. Without an endpoint nothing is
configured: `ENABLED` stays False, the SDK is never imported, and every helper here returns at once (`span`
gives a shared null context), so the request path pays one attribute read per helper.

Where spans are (docs/operations.md "Traces"): a request (`api/edge/observe.py`; gRPC in `grpc_server.py`), an
agent run (`runner.py`, its parent the task's stored traceparent), a commit batch (`store/writer.py`, its
parent the first write's span, linked to the others'), a bus publish (`bus/`), a webhook call
(`push/deliverer.py`, its parent the task's traceparent, sent on as the `traceparent` header) and a CLI
process (`agents/cli_run.py`, `TRACEPARENT` in its environment).

The W3C `traceparent` of the request that created a task is stored with it (`tasks.traceparent`), so the
runs of every turn, on whichever replica or remote worker, and its webhook calls continue that trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "Span",
    "SpanKind",
    "current_ids",
    "enable",
    "setup",
    "shutdown",
    "span",
    "traceparent",
]

SERVICE_NAME = "a2a-coding-server"
ENABLED = False
"""Whether spans are made and exported (`setup` found an endpoint, or a test called `enable`)."""
_tracer: trace.Tracer = trace.NoOpTracer()
_provider: Any = None
_PROPAGATOR = TraceContextTextMapPropagator()
_NULL = contextlib.nullcontext()
log = logging.getLogger(__name__)


def endpoint_from(settings: Any) -> str:
    """The OTLP/HTTP traces URL the settings name ('' : tracing off): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as
    it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`; nothing when `OTEL_SDK_DISABLED` is true."""
    if getattr(settings, "otel_sdk_disabled", False):
        return ""
    exact = getattr(settings, "otel_exporter_otlp_traces_endpoint", "") or ""
    if exact:
        return exact
    base = getattr(settings, "otel_exporter_otlp_endpoint", "") or ""
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def setup(endpoint: str, replica: str, service_name: str = "") -> bool:
    """Export spans to `endpoint` (OTLP/HTTP); nothing when it is empty. True when tracing is on."""
    if not endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {"service.instance.id": replica}
    if service_name or not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service_name or SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    enable(provider)
    return True


def enable(provider: Any) -> None:
    """Make spans with `provider` (`setup`; in-process tests give one with an in-memory exporter)."""
    global ENABLED, _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("app", schema_url=None)
    ENABLED = True


def disable() -> None:
    """Back to no spans (tests)."""
    global ENABLED, _tracer, _provider
    ENABLED, _tracer, _provider = False, trace.NoOpTracer(), None


def shutdown() -> None:
    """Export what is left and stop (the process is ending)."""
    if _provider is not None:
        _provider.shutdown()


# ---- making spans ------------------------------------------------------------------------------------------


def _parent(traceparent: str | None) -> otel_context.Context | None:
    return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None


def span(
    name: str,
    *,
    traceparent: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    links: Sequence[SpanContext] = (),
) -> contextlib.AbstractContextManager[Span | None]:
    """A span made current while the block runs (None with tracing off): a child of `traceparent` when
    given, else of the current span; linked to `links`."""
    if not ENABLED:
        return _NULL
    return _tracer.start_as_current_span(
        name,
        context=_parent(traceparent),
        kind=kind,
        attributes=attributes,
        links=[Link(c) for c in links if c.is_valid] or None,
    )


def start(
    name: str,
    *,
    traceparent: str | None = None,
    headers: Mapping[str, str] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Span:
    """A started span not yet current (`current(span)` makes it so), for what does not fit one block: a
    request whose stream outlives its handler. Its parent: `traceparent`, or the W3C headers `headers`
    carries, or the current span. Only with tracing on."""
    if headers is not None:
        parent = _PROPAGATOR.extract(headers)
    else:
        parent = _parent(traceparent)
    return _tracer.start_span(name, context=parent, kind=kind, attributes=attributes)


@contextlib.contextmanager
def current(s: Span) -> Iterator[Span]:
    """`s` is the current span in the block (it is not ended on leaving)."""
    token = otel_context.attach(trace.set_span_in_context(s))
    try:
        yield s
    finally:
        otel_context.detach(token)


def failed(s: Span | None, exc: BaseException) -> None:
    """Mark `s` failed by `exc`."""
    if s is not None and s.is_recording():
        s.record_exception(exc)
        s.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))


def error(s: Span | None, description: str) -> None:
    """Mark `s` failed with a short description."""
    if s is not None and s.is_recording():
        s.set_status(Status(StatusCode.ERROR, description))


# ---- carrying the context ----------------------------------------------------------------------------


def traceparent(s: Span | None = None) -> str | None:
    """The W3C traceparent of `s` (default: the current span); None with tracing off or no span."""
    if not ENABLED:
        return None
    context = (s or trace.get_current_span()).get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def current_context() -> SpanContext | None:
    """The current span's context, when tracing is on and there is one (a write remembers its caller's)."""
    if not ENABLED:
        return None
    context = trace.get_current_span().get_span_context()
    return context if context.is_valid else None


def current_ids() -> tuple[str, str] | None:
    """The current trace and span ids as hex (for log records); None with tracing off or no span."""
    if not ENABLED:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def batch(name: str, contexts: Sequence[SpanContext | None], attributes: Mapping[str, Any]) -> Any:
    """A span for work done for many callers at once (a commit batch): the child of the first caller's span,
    linked to the others'. A null context when no caller was traced (nothing to hang it on)."""
    if not ENABLED:
        return _NULL
    seen: dict[tuple[int, int], SpanContext] = {}
    for c in contexts:
        if c is not None:
            seen.setdefault((c.trace_id, c.span_id), c)
    traced = list(seen.values())
    if not traced:
        return _NULL
    try:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(traced[0]))
        return _tracer.start_as_current_span(
            name, context=parent, attributes=attributes, links=[Link(c) for c in traced[1:]] or None
        )
    except Exception:  # a span is never worth a commit: the writer's flusher must go on
        log.exception("could not start the %s span", name)
        return _NULL
