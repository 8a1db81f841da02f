"""The v0.3 wire codec: JSON-RPC params in, `kind`-tagged JSON out.

Input is validated with pydantic models that mirror the v0.3 JSON Schema (unknown fields ignored); a
validation failure becomes InvalidParamsError naming the field. Output is built by hand from the domain
model because it is on the hot path of every response and event.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_snake

from .errors import InvalidParamsError
from .events import ArtifactUpdate, Event, StatusUpdate
from .model import Artifact, Message, Part, Role, SendConfig, Task, TaskState, TaskStatus, new_id
from .validation import TaskIdParams, validate

PROTOCOL_VERSION = "0.3.0"


class _In(BaseModel):
    """What v0.3 requests carry, by their JSON names, and by the proto's snake_case names too (`message_id`),
    as a2a-python's v0.3 models accept them and as the v1.0 binding does; errors name the JSON names."""

    model_config = ConfigDict(
        extra="ignore",
        alias_generator=to_snake,
        validate_by_name=True,
        validate_by_alias=True,
        loc_by_alias=False,
    )


class _Renamed(_In):
    """A model with fields whose proto name differs (`messageId` / `message_id`): both names with different
    values are refused rather than one picked (as v1.0 refuses them). Only these models pay the check."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, alias in _renamed(cls):
                if alias in data and name in data and data[alias] != data[name]:
                    raise ValueError(f"{name} and {alias} differ: send one of them")
        return data


@functools.cache
def _renamed(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """A model's fields whose proto name differs from their JSON name, as (JSON name, proto name)."""
    return tuple(
        (name, f.alias) for name, f in model.model_fields.items() if f.alias is not None and f.alias != name
    )


class _TextPart(_In):
    kind: Literal["text"]
    text: str
    metadata: dict[str, Any] | None = None


class _FileWithBytes(_Renamed):
    bytes: str
    mimeType: str | None = None
    name: str | None = None

    @field_validator("bytes")
    @classmethod
    def _base64(cls, v: str) -> str:
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("must be base64-encoded") from exc
        return v


class _FileWithUri(_Renamed):
    uri: str = Field(min_length=1)
    mimeType: str | None = None
    name: str | None = None


class _FilePart(_In):
    kind: Literal["file"]
    file: _FileWithBytes | _FileWithUri
    metadata: dict[str, Any] | None = None


class _DataPart(_In):
    kind: Literal["data"]
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


_PartIn = Annotated[_TextPart | _FilePart | _DataPart, Field(discriminator="kind")]


class _MessageIn(_Renamed):
    """A message as documents write it too: no `kind`, `role` or `messageId` (a message from the user, its
    id made here), parts tagged `type` and text parts holding `content` (`_documented_part`)."""

    kind: Literal["message"] = "message"
    messageId: str | None = Field(default=None, min_length=1, max_length=256)
    role: Literal["user", "agent"] = "user"
    parts: list[_PartIn] = Field(min_length=1)
    contextId: str | None = Field(default=None, min_length=1, max_length=256)
    taskId: str | None = Field(default=None, min_length=1, max_length=256)
    referenceTaskIds: list[str] = Field(default_factory=list)
    extensions: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None

    @field_validator("parts", mode="before")
    @classmethod
    def _documented_parts(cls, v: Any) -> Any:
        return [_documented_part(p) for p in v] if isinstance(v, list) else v


def _documented_part(p: Any) -> Any:
    """A part as pre-0.3 documents write it, `{"type": "text", "content": "hi"}`: `type` is its `kind`, and a
    text part's `content` (a string) its `text`."""
    if not isinstance(p, dict):
        return p
    if "kind" not in p and "type" in p:
        p = {**p, "kind": p["type"]}
    if p.get("kind") == "text" and "text" not in p and isinstance(p.get("content"), str):
        p = {**p, "text": p["content"]}
    return p


class _SendConfigIn(_Renamed):
    blocking: bool | None = None
    historyLength: int | None = Field(default=None, ge=0)
    acceptedOutputModes: list[str] | None = None
    pushNotificationConfig: dict[str, Any] | None = None


class _SendParamsIn(_In):
    message: _MessageIn
    configuration: _SendConfigIn | None = None
    metadata: dict[str, Any] | None = None


LEGACY_TASK_ID = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""What a legacy `tasks/send` may name a new task: it is a path segment of the REST routes and a key."""


class _LegacySendIn(_SendParamsIn, _Renamed):
    """Pre-0.3 `tasks/send` params (the seed documents): the client names the task (`id`), its session is
    the context (`sessionId`), and `historyLength`, `acceptedOutputModes` and `pushNotification` sit beside
    the message."""

    id: str | None = None
    sessionId: str | None = Field(default=None, min_length=1, max_length=256)
    historyLength: int | None = Field(default=None, ge=0)
    acceptedOutputModes: list[str] | None = None
    pushNotification: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _task_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(LEGACY_TASK_ID, v):
            raise ValueError(
                "a task id is 1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit"
            )
        return v


class _TaskQueryIn(_Renamed, TaskIdParams):
    id: str = Field(min_length=1)
    historyLength: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class _TaskIdIn(_In, TaskIdParams):
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


def _part_in(p: _TextPart | _FilePart | _DataPart) -> Part:
    if isinstance(p, _TextPart):
        return Part(text=p.text, metadata=p.metadata)
    if isinstance(p, _DataPart):
        return Part(data=p.data, metadata=p.metadata)
    f = p.file
    if isinstance(f, _FileWithBytes):
        return Part(
            raw=base64.b64decode(f.bytes),
            media_type=f.mimeType,
            filename=f.name,
            metadata=p.metadata,
        )
    return Part(url=f.uri, media_type=f.mimeType, filename=f.name, metadata=p.metadata)


def decode_send(params: Any) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    """`message/send` and `message/stream` params → domain message and configuration."""
    return _send_of(validate(_SendParamsIn, params))


def decode_legacy_send(params: Any) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    """Pre-0.3 `tasks/send` and `tasks/sendSubscribe` params → domain message and configuration: `sessionId`
    is the message's context, `id` the task it continues or names (`SendConfig.task_id`); either given
    twice with different values (`message.contextId`, `message.taskId`) is refused."""
    p = validate(_LegacySendIn, params)
    message, config, push = _send_of(p)
    for legacy, name, value in (
        ("sessionId", "contextId", message.context_id),
        ("id", "taskId", message.task_id),
    ):
        given = getattr(p, legacy)
        if given is not None and value is not None and value != given:
            raise InvalidParamsError(f"Invalid params: {legacy} and message.{name} differ: send one of them")
    if p.sessionId is not None:
        message.context_id = p.sessionId
    if p.id is not None:
        message.task_id = None
        config.task_id = p.id
    if config.history_length is None:
        config.history_length = p.historyLength
    if not config.accepted_output_modes:
        config.accepted_output_modes = p.acceptedOutputModes or []
    return message, config, push if push is not None else p.pushNotification


def _send_of(p: _SendParamsIn) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    m = p.message
    message = Message(
        message_id=m.messageId or new_id(),
        role=Role(m.role),
        parts=[_part_in(x) for x in m.parts],
        context_id=m.contextId,
        task_id=m.taskId,
        reference_task_ids=m.referenceTaskIds,
        extensions=m.extensions,
        metadata=m.metadata,
    )
    cfg = p.configuration
    config = SendConfig(
        blocking=cfg.blocking is not False if cfg else True,
        history_length=cfg.historyLength if cfg else None,
        accepted_output_modes=(cfg.acceptedOutputModes or []) if cfg else [],
        made_message_id=m.messageId is None,
    )
    push = cfg.pushNotificationConfig if cfg else None
    return message, config, push


def decode_task_query(params: Any) -> tuple[str, int | None]:
    p = validate(_TaskQueryIn, params)
    return p.id, p.historyLength


def decode_task_id(params: Any) -> tuple[str, dict[str, Any] | None]:
    p = validate(_TaskIdIn, params)
    return p.id, p.metadata


def encode_part(p: Part) -> dict[str, Any]:
    if p.text is not None:
        out: dict[str, Any] = {"kind": "text", "text": p.text}
    elif p.raw is not None or p.url is not None:
        f: dict[str, Any] = (
            {"bytes": base64.b64encode(p.raw).decode()} if p.raw is not None else {"uri": p.url}
        )
        if p.media_type:
            f["mimeType"] = p.media_type
        if p.filename:
            f["name"] = p.filename
        out = {"kind": "file", "file": f}
    else:
        data = p.data if isinstance(p.data, dict) else {"value": p.data}
        out = {"kind": "data", "data": data}
    if p.metadata:
        out["metadata"] = p.metadata
    return out


def encode_message(m: Message) -> dict[str, Any]:
    return m.with_optional(
        {
            "kind": "message",
            "messageId": m.message_id,
            "role": m.role.value,
            "parts": [encode_part(p) for p in m.parts],
        }
    )


def encode_status(s: TaskStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"state": s.state.value, "timestamp": s.timestamp}
    if s.message is not None:
        out["message"] = encode_message(s.message)
    return out


def encode_artifact(a: Artifact) -> dict[str, Any]:
    return a.encode(encode_part)


STATE_VALUES = {state: state.value for state in TaskState}


def encode_task(t: Task, history_length: int | None = None) -> dict[str, Any]:
    view = t.with_history(history_length)
    out: dict[str, Any] = {
        "kind": "task",
        "id": t.id,
        "contextId": t.context_id,
        "status": encode_status(t.status),
        "history": [encode_message(m) for m in view.history],
        "artifacts": [encode_artifact(a) for a in t.artifacts],
    }
    metadata = t.wire_metadata(STATE_VALUES)
    if metadata:
        out["metadata"] = metadata
    return out


def encode_event(e: Event) -> dict[str, Any]:
    if isinstance(e, StatusUpdate):
        out: dict[str, Any] = {
            "kind": "status-update",
            "taskId": e.task_id,
            "contextId": e.context_id,
            "status": encode_status(e.status),
            "final": e.final,
        }
    else:
        assert isinstance(e, ArtifactUpdate)
        out = {
            "kind": "artifact-update",
            "taskId": e.task_id,
            "contextId": e.context_id,
            "artifact": encode_artifact(e.artifact),
            "append": e.append,
            "lastChunk": e.last_chunk,
        }
    if e.metadata:
        out["metadata"] = e.metadata
    return out
