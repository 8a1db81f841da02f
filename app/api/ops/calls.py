"""What every A2A operation handler gets, and checks shared by both wire versions and both bindings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from app.protocol.errors import ContentTypeNotSupportedError, InvalidParamsError
from app.protocol.events import Event, EventRecord
from app.protocol.model import Message, Task
from app.tasks.service import Snapshot
from app.telemetry import logs

from ..deps import Components, components, owner_of
from ..extensions import ACTIVE_KEY, split
from ..versions import requested_version

DISCOVERY = frozenset(
    {
        "agent/getAuthenticatedExtendedCard",
        "agent/authenticatedExtendedCard",
        "GetExtendedAgentCard",
        "GetAgentCard",
    }
)
"""The operations (JSON-RPC methods, gRPC RPCs) that fetch a card: they never need an extension."""
# Event sequence numbers are INTEGER columns: 32-bit signed on PostgreSQL.
MAX_SEQ = 2**31 - 1
MAX_SEQ_DIGITS = len(str(MAX_SEQ))


@dataclass(slots=True)
class Call:
    """One A2A operation as a handler sees it, whatever the binding (JSON-RPC, REST or gRPC)."""

    headers: Mapping[str, str]
    """The request's headers (gRPC: its metadata), lower-case names: `Last-Event-ID` is read from here."""
    c: Components
    owner: str
    version: str
    extensions: list[str] = field(default_factory=list)
    """The extension URIs the request names (`A2A-Extensions`, `X-A2A-Extensions`; gRPC: metadata)."""
    idempotency_key: str | None = None
    """The `Idempotency-Key` header; sends use it (the task service checks and keeps it)."""
    active: tuple[str, ...] = ()
    """The extensions activated for this call: those requested that the role's card declares."""

    def __post_init__(self) -> None:
        # Every binding builds its call here: what it logs from now on names the role and the caller.
        logs.bind(role=self.c.role, principal=self.owner)

    @classmethod
    def of(cls, request: Request, *, discovery: bool = False, version: str | None = None) -> Call:
        """The call of an HTTP request; refused (-32008) when it does not name an extension the card
        requires, unless it fetches a card (`discovery`). What it activates is echoed in the response
        (`extensions.EchoExtensions`)."""
        c = components(request)
        requested = requested_extensions(request)
        active = c.card.extensions.activate(requested, discovery)
        if active:
            request.scope[ACTIVE_KEY] = active
        return cls(
            headers=request.headers,
            c=c,
            owner=owner_of(request),
            version=version or requested_version(request),
            extensions=requested,
            idempotency_key=request.headers.get("idempotency-key"),
            active=active,
        )


Item = Snapshot | EventRecord | Message
Stream = tuple[AsyncIterator[Item], Callable[[Item], Any]]
Handler = Callable[[Any, Call], Awaitable[Any]]
StreamHandler = Callable[[Any, Call], Awaitable[Stream]]


@dataclass(frozen=True, slots=True)
class Replies:
    """How one binding prints what a send answers and what a stream carries: the one stream encoder."""

    encode_task: Callable[..., dict[str, Any]]
    encode_message: Callable[[Message], dict[str, Any]]
    encode_event: Callable[[Event], dict[str, Any]]
    oneof: bool
    """ProtoJSON (v1.0, v0.3 REST) wraps a Task or a Message as `{"task": ...}` / `{"message": ...}` (the
    `SendMessageResponse` and `StreamResponse` oneofs); v0.3 JSON-RPC sends them bare, tagged by `kind`."""

    def result(self, result: Task | Message, history_length: int | None = None) -> dict[str, Any]:
        """A send's result, or a stream's first item."""
        if isinstance(result, Message):
            body = self.encode_message(result)
            return {"message": body} if self.oneof else body
        body = self.encode_task(result, history_length)
        return {"task": body} if self.oneof else body

    def stream(self, history_length: int | None = None) -> Callable[[Item], Any]:
        """The encoder of a stream's items: the task (or message) first, then its events."""

        def encode(item: Item) -> Any:
            if isinstance(item, Snapshot):
                return self.result(item.task, history_length)
            if isinstance(item, Message):
                return self.result(item)
            return self.encode_event(item.event)

        return encode


def requested_extensions(request: Request) -> list[str]:
    """Extension URIs from `A2A-Extensions` (v1.0) and `X-A2A-Extensions` (v0.3), comma-separated."""
    headers = request.headers
    return split(headers.getlist("a2a-extensions") + headers.getlist("x-a2a-extensions"))


def _accepts(mode: str, media_type: str) -> bool:
    mode, media_type = mode.lower(), media_type.split(";")[0].strip().lower()
    if mode in ("*/*", media_type):
        return True
    return mode.endswith("/*") and media_type.startswith(mode[:-1])


def accept_message(message: Message, call: Call) -> Message:
    """Check a new message against what the agent takes, and attach the extensions the call asked for
    and those it activated."""
    check_parts(message, call.c.input_modes)
    message.requested_extensions = call.extensions
    message.active_extensions = list(call.active)
    return message


def check_parts(message: Message, accepted: tuple[str, ...]) -> None:
    """Refuse a part whose declared media type the agent does not take (-32005)."""
    for part in message.parts:
        if part.media_type and not any(_accepts(mode, part.media_type) for mode in accepted):
            raise ContentTypeNotSupportedError(
                f"This agent does not accept {part.media_type}; it takes {', '.join(accepted)}",
                {"mediaType": part.media_type},
            )


def last_event_id(call: Call, params: Any) -> int | None:
    """This server's resume cursor: `Last-Event-ID`, or `metadata.lastEventId` in the params.

    A sequence number is a non-negative integer within the database's INTEGER; anything else (a float,
    a boolean, 400 digits, a negative number) is refused here, before the stream starts.
    """
    raw = call.headers.get("last-event-id")
    if raw is None and isinstance(params, dict) and isinstance(params.get("metadata"), dict):
        raw = params["metadata"].get("lastEventId")
    if raw is None:
        return None
    value: int | None = None
    if isinstance(raw, str) and raw.strip().isdecimal() and len(raw.strip()) <= MAX_SEQ_DIGITS:
        value = int(raw)
    elif isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, float) and raw.is_integer() and 0 <= raw <= MAX_SEQ:
        value = int(raw)
    if value is None or not 0 <= value <= MAX_SEQ:
        raise InvalidParamsError(
            f"Last-Event-ID must be an event sequence number: an integer from 0 to {MAX_SEQ}",
            {"lastEventId": str(raw)[:40]},
        )
    return value
