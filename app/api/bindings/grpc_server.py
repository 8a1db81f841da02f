"""The gRPC binding: one `grpc.aio` server serving both A2A services on one port.

The v1.0 service (`lf.a2a.v1.A2AService`, `grpc_v10.py`) and the v0.3 one (`a2a.v1.A2AService`,
`grpc_v03.py`) live in different proto packages, so the package of the method picks the version. As for
the other bindings, a binding extracts params and an op does the work: the request proto becomes its
ProtoJSON dict (`json_format.MessageToDict`), a method's `params` reshapes it where the proto differs from
what the op reads (the v0.3 resource names), the same operation handler the REST binding calls runs it,
and its ProtoJSON answer is parsed into the response proto (`json_format.ParseDict`; a stream: one
`StreamResponse` per item).

The metadata carries what HTTP headers carry: the credential (`authorization: Bearer ...`, `x-api-key`,
checked by the same `Authenticator`), `a2a-role` (the role whose agent serves the call; none: the default
role), `a2a-version` (optional; another version than the service's is refused), `a2a-extensions` (the
activated ones are echoed in the initial metadata, `api/extensions.py`),
`idempotency-key`, `last-event-id`. Every error aborts the call with the error's `grpc_status` and a
`google.rpc.Status` carrying the ErrorInfo (reason, domain) in the `grpc-status-details-bin` trailer; v0.3
messages are `<ErrorClassName>: <message>`, which the v0.3 clients map back to their error classes. Bytes that
are not the request message are INVALID_ARGUMENT; a message over MAX_BODY_BYTES is RESOURCE_EXHAUSTED (gRPC's
own check). When the server stops, open streams end at once with UNAVAILABLE naming the last event sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.rpc import error_details_pb2, status_pb2  # noqa: F401  (ErrorInfo joins the pool for ParseDict)

from app.agents.errors import SettingError
from app.protocol.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    PermissionDeniedError,
    VersionNotSupportedError,
)
from app.telemetry import logs, traces

from ..card.build import ROLE_METADATA
from ..deps import Components
from ..edge.auth import Authenticator
from ..errors import error_info, error_name
from ..extensions import echo_metadata, split
from ..faults import unexpected
from ..ops.admission import open_stream
from ..ops.calls import DISCOVERY, Call
from ..sanity import check_json
from ..versions import parse_version, version_header

log = logging.getLogger(__name__)

STATUS_DETAILS_KEY = "grpc-status-details-bin"
SHUTDOWN_GRACE_S = 1.0
"""How long unary calls in flight get to finish when the server stops (streams end at once, saying where
to resume)."""

Params = Callable[[dict[str, Any]], dict[str, Any]]
Handler = Callable[[Any, Call], Awaitable[Any]]
Op = Handler | tuple[Handler, Params]


def same(params: dict[str, Any]) -> dict[str, Any]:
    return params


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC: its request and response protos, the op that runs it, and how its params are read."""

    name: str
    request: type[Message]
    response: type[Message]
    handler: Handler
    params: Params
    streaming: bool


@dataclass(frozen=True, slots=True)
class Service:
    """One A2A gRPC service: a protocol version's methods under its full service name."""

    name: str
    version: str
    methods: tuple[Method, ...]

    @classmethod
    def of(cls, descriptor: ServiceDescriptor, version: str, ops: dict[str, Op]) -> Service:
        """Every RPC of the proto's service with its op (a handler, or a handler and its params); the
        request and response types come from the proto, so they cannot drift from it."""
        missing = {m.name for m in descriptor.methods} ^ set(ops)
        if missing:
            raise ValueError(f"{descriptor.full_name}: no op for, or no RPC named, {sorted(missing)}")
        methods = []
        for m in descriptor.methods:
            op = ops[m.name]
            handler, params = op if isinstance(op, tuple) else (op, same)
            methods.append(
                Method(
                    m.name,
                    GetMessageClass(m.input_type),
                    GetMessageClass(m.output_type),
                    handler,
                    params,
                    m.server_streaming,
                )
            )
        return cls(descriptor.full_name, version, tuple(methods))


class ShuttingDownError(A2AError):
    """A stream the stopping server ends: UNAVAILABLE, so the client subscribes again (elsewhere)."""

    grpc_status = "UNAVAILABLE"
    reason = "UNAVAILABLE"

    def __init__(self, seq: int | None) -> None:
        resume = f" with last-event-id {seq}" if seq is not None else ""
        super().__init__(
            f"The server is shutting down: subscribe to the task again{resume} to continue",
            {"lastEventId": seq} if seq is not None else None,
        )


class _Undecodable:
    """What a request that is not its message decodes to: answered INVALID_ARGUMENT, not INTERNAL."""


UNDECODABLE = _Undecodable()


def _decoder(cls: type[Message]) -> Callable[[bytes], Message | _Undecodable]:
    def decode(raw: bytes) -> Message | _Undecodable:
        try:
            return cls.FromString(raw)
        except Exception:  # DecodeError, or whatever else the bytes make the parser raise
            return UNDECODABLE

    return decode


def to_proto(payload: dict[str, Any], cls: type[Message]) -> Message:
    """The op's ProtoJSON answer as the response proto. What the JSON bindings carry beyond the proto (a
    push config's `metadata`, say) has no field here and is left out."""
    return json_format.ParseDict(payload, cls(), ignore_unknown_fields=True)


def _encode(message: Message) -> bytes:
    return message.SerializeToString()


class Binding:
    """The methods of both services over the app's components, with its authenticator."""

    def __init__(self, components: Components, authenticator: Authenticator) -> None:
        self.c = components
        self.auth = authenticator
        self._streams: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def farewell(self) -> None:
        """End every open stream now, each with UNAVAILABLE naming where to resume (the server stops)."""
        self._stopping = True
        for task in self._streams:
            task.cancel()

    def handlers(self, service: Service) -> grpc.GenericRpcHandler:
        table = {}
        for m in service.methods:
            kind = (
                grpc.unary_stream_rpc_method_handler if m.streaming else grpc.unary_unary_rpc_method_handler
            )
            behaviour = self._stream(service, m) if m.streaming else self._unary(service, m)
            table[m.name] = kind(
                behaviour, request_deserializer=_decoder(m.request), response_serializer=_encode
            )
        return grpc.method_handlers_generic_handler(service.name, table)

    async def _call(self, service: Service, m: Method, context: grpc.aio.ServicerContext) -> Call:
        """The call: the caller's principal from the metadata, the service's version, the extensions it
        activates (refused when it misses a required one; echoed in the initial metadata)."""
        headers: dict[str, str] = {}
        extensions: list[str] = []
        legacy = False
        for key, value in context.invocation_metadata() or ():
            if isinstance(value, str):
                headers.setdefault(key, value)
                if key in ("a2a-extensions", "x-a2a-extensions"):
                    extensions.append(value)
                    legacy = legacy or key == "x-a2a-extensions"
        principal = await self.auth.authenticate(headers)
        if principal.worker:
            raise PermissionDeniedError("A worker credential may call only the worker endpoints")
        raw = version_header(headers)
        if raw and parse_version(raw) != service.version:
            raise VersionNotSupportedError(
                f"A2A-Version {raw} is not served by {service.name} (v{service.version})", {"version": raw}
            )
        c = self.c
        role = headers.get(ROLE_METADATA, "").strip()
        if role:
            c = self.c.roles.get(role)  # type: ignore[assignment]
            if c is None:
                raise InvalidParamsError(
                    f"No agent has the role {role!r} here (metadata {ROLE_METADATA})",
                    {"role": role, "roles": list(self.c.roles)},
                )
        requested = split(extensions)
        active = c.card.extensions.activate(requested, m.name in DISCOVERY)
        if active:
            await context.send_initial_metadata(echo_metadata(active, legacy))
        return Call(
            headers=headers,
            c=c,
            owner=principal.name,
            version=service.version,
            extensions=requested,
            idempotency_key=headers.get("idempotency-key"),
            active=active,
        )

    def _params(self, m: Method, request: Message | _Undecodable) -> dict[str, Any]:
        """The request's ProtoJSON, checked as the JSON bindings check a body (depth, NUL), as the op's
        params."""
        if isinstance(request, _Undecodable):
            raise InvalidRequestError(f"The request is not a {m.request.DESCRIPTOR.full_name} message")
        try:
            params = json_format.MessageToDict(request)
        except (json_format.Error, ValueError) as exc:  # a value ProtoJSON cannot print (a far Timestamp)
            raise InvalidParamsError(f"Invalid params: {exc}") from None
        check_json(params)
        return m.params(params)

    def _span(self, service: Service, m: Method, context: grpc.aio.ServicerContext) -> traces.Span:
        """The call's server span (tracing on), the child of the `traceparent` in its metadata if any."""
        carrier = {
            k: v
            for k, v in context.invocation_metadata() or ()
            if k in ("traceparent", "tracestate") and isinstance(v, str)
        }
        return traces.start(
            f"gRPC {service.name}/{m.name}",
            headers=carrier,
            kind=traces.SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service.name, "rpc.method": m.name},
        )

    def _count(
        self,
        service: Service,
        m: Method,
        code: str,
        span: traces.Span | None,
        started: float | None = None,
    ) -> None:
        """One answered call in the metrics (a unary call with its duration), when they are on; its status on
        its span, when traced."""
        if span is not None:
            span.set_attribute("rpc.grpc.status", code)
            if code != "OK":
                traces.error(span, code)
        metrics = self.c.metrics
        if metrics is None:
            return
        metrics.grpc_calls.labels(service.version, m.name, code).inc()
        if started is not None:
            metrics.grpc_duration.labels(service.version, m.name).observe(time.perf_counter() - started)

    def _unary(self, service: Service, m: Method) -> Callable[..., Awaitable[Message]]:
        where = f"gRPC {service.name}/{m.name}"

        async def reply(
            request: Message | _Undecodable, context: grpc.aio.ServicerContext, span: traces.Span | None
        ) -> Message:
            started = time.perf_counter()
            try:
                call = await self._call(service, m, context)
                result = await m.handler(self._params(m, request), call)
                answer = to_proto(result or {}, m.response)
            except Exception as exc:
                err = exc if isinstance(exc, A2AError) else unexpected(exc, where)
                self._count(service, m, err.grpc_status, span, started)
                await abort(context, err, service.version)
            self._count(service, m, "OK", span, started)
            return answer

        async def behaviour(request: Message | _Undecodable, context: grpc.aio.ServicerContext) -> Message:
            logs.scope()
            if not traces.ENABLED:
                return await reply(request, context, None)
            span = self._span(service, m, context)
            try:
                with traces.current(span):
                    return await reply(request, context, span)
            finally:
                span.end()

        return behaviour

    def _stream(self, service: Service, m: Method) -> Callable[..., AsyncIterator[Message]]:
        where = f"gRPC {service.name}/{m.name}"

        async def behaviour(
            request: Message | _Undecodable, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Message]:
            logs.scope()
            span = self._span(service, m, context) if traces.ENABLED else None
            inner = stream(request, context, span)
            try:
                async for item in inner:
                    yield item
            finally:
                await inner.aclose()
                if span is not None:
                    span.end()

        async def stream(
            request: Message | _Undecodable, context: grpc.aio.ServicerContext, span: traces.Span | None
        ) -> AsyncIterator[Message]:
            try:
                # The span is current while the call is set up (a send stores its task with it), not
                # across the stream's yields.
                with traces.current(span) if span is not None else contextlib.nullcontext():
                    call = await self._call(service, m, context)
                    params = self._params(m, request)
                    items, encode = await open_stream(call, lambda: m.handler(params, call))
            except Exception as exc:
                err = exc if isinstance(exc, A2AError) else unexpected(exc, where)
                self._count(service, m, err.grpc_status, span)
                await abort(context, err, service.version)
            failure: A2AError | None = None
            task = asyncio.current_task()
            assert task is not None
            self._streams.add(task)
            seq: int | None = None
            try:
                async for item in items:
                    yield to_proto(encode(item), m.response)
                    seq = getattr(item, "seq", seq)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                task.uncancel()
                failure = ShuttingDownError(seq)
            except A2AError as err:
                failure = err
            except Exception as exc:
                failure = unexpected(exc, where)
            finally:
                self._streams.discard(task)
                await items.aclose()  # type: ignore[attr-defined]
            self._count(service, m, "OK" if failure is None else failure.grpc_status, span)
            if failure is not None:
                await abort(context, failure, service.version)

        return behaviour


async def abort(context: grpc.aio.ServicerContext, err: A2AError, version: str) -> NoReturn:
    """End the call with the error's status code and its `google.rpc.Status` (with the ErrorInfo)."""
    message = f"{error_name(err)}: {err.message}" if version == "0.3" else err.message
    code = grpc.StatusCode[err.grpc_status]
    status = json_format.ParseDict(
        {"code": code.value[0], "message": message, "details": [error_info(err)]}, status_pb2.Status()
    )
    await context.abort(code, message, trailing_metadata=((STATUS_DETAILS_KEY, status.SerializeToString()),))
    raise AssertionError("abort returns only by raising")  # pragma: no cover


class GrpcSettings(Protocol):
    """What `GrpcOptions.from_settings` reads of the settings (`settings.Settings`, not imported here)."""

    grpc_host: str
    grpc_port: int
    max_body_bytes: int
    workers: int


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Where the gRPC server listens (GRPC_HOST, GRPC_PORT) and the largest request it takes
    (MAX_BODY_BYTES); `reuse_port` with WORKERS above 1: sibling worker processes share the port."""

    host: str
    port: int
    max_body_bytes: int = 10 * 1024 * 1024
    reuse_port: bool = False

    @classmethod
    def from_settings(cls, settings: GrpcSettings) -> GrpcOptions:
        return cls(settings.grpc_host, settings.grpc_port, settings.max_body_bytes, settings.workers > 1)


def check_port(host: str, port: int) -> None:
    """Refuse at start-up, in one line, a gRPC port (GRPC_HOST:GRPC_PORT) another process holds."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(infos[0][4])
    except OSError as exc:
        raise SettingError("GRPC_PORT", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class Running:
    """A started gRPC server and its binding."""

    server: grpc.aio.Server
    binding: Binding

    async def stop(self) -> None:
        """Open streams end at once (UNAVAILABLE, with where to resume); other calls get the grace."""
        self.binding.farewell()
        await self.server.stop(SHUTDOWN_GRACE_S)


async def start(
    components: Components, authenticator: Authenticator, services: tuple[Service, ...], options: GrpcOptions
) -> Running:
    """The gRPC server listening on GRPC_HOST:GRPC_PORT with `services`; started."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", options.max_body_bytes),
            # gRPC shares a port between processes by default; a second server must fail instead, unless
            # it is a sibling worker (WORKERS): then every worker listens on the port and the kernel spreads
            # the connections, as for HTTP.
            ("grpc.so_reuseport", 1 if options.reuse_port else 0),
        ]
    )
    binding = Binding(components, authenticator)
    server.add_generic_rpc_handlers(tuple(binding.handlers(s) for s in services))
    address = f"{options.host}:{options.port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as exc:
        raise SettingError("GRPC_PORT", f"cannot listen on {address}: {exc}") from None
    await server.start()
    log.info("gRPC on %s (A2A v1.0 and v0.3)", address)
    return Running(server, binding)
