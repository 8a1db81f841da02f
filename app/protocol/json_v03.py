"""The v0.3 wire codec: JSON-RPC params in, `kind`-tagged JSON out.

Input is validated with pydantic models that mirror the v0.3 JSON Schema (unknown fields ignored); a
validation failure becomes InvalidParamsError naming the field. Output is built by hand from the domain
model because it is on the hot path of every response and event.
"""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_snake

from .events import ArtifactUpdate, Event, StatusUpdate
from .model import Artifact, Message, Part, Role, SendConfig, Task, TaskState, TaskStatus
from .validation import validate

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
    kind: Literal["message"] = "message"
    messageId: str = Field(min_length=1, max_length=256)
    role: Literal["user", "agent"]
    parts: list[_PartIn] = Field(min_length=1)
    contextId: str | None = Field(default=None, min_length=1, max_length=256)
    taskId: str | None = Field(default=None, min_length=1, max_length=256)
    referenceTaskIds: list[str] = Field(default_factory=list)
    extensions: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None


class _SendConfigIn(_Renamed):
    blocking: bool | None = None
    historyLength: int | None = Field(default=None, ge=0)
    acceptedOutputModes: list[str] | None = None
    pushNotificationConfig: dict[str, Any] | None = None


class _SendParamsIn(_In):
    message: _MessageIn
    configuration: _SendConfigIn | None = None
    metadata: dict[str, Any] | None = None


class _TaskQueryIn(_Renamed):
    id: str = Field(min_length=1)
    historyLength: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class _TaskIdIn(_In):
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


def _legacy_parts(params: Any) -> Any:
    """Seed documents (pre-0.3) wrote parts as `{"type": "text", ...}`; read them as `kind`."""
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    if isinstance(parts, list) and any(
        isinstance(p, dict) and "kind" not in p and "type" in p for p in parts
    ):
        fixed = [{**p, "kind": p["type"]} if isinstance(p, dict) and "kind" not in p else p for p in parts]
        params = {**params, "message": {**message, "parts": fixed}}
    return params


def decode_send(params: Any) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    """`message/send` and `message/stream` params → domain message and configuration."""
    p = validate(_SendParamsIn, _legacy_parts(params))
    m = p.message
    message = Message(
        message_id=m.messageId,
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
