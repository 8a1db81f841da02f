"""The v1.0 wire codec: ProtoJSON of `lf.a2a.v1` (camelCase, enum names, flat parts, oneof wrappers).

Input is validated with pydantic models mirroring the proto's REQUIRED fields; unknown fields are ignored
(spec §5.7), and fields (by JSON or proto name) and enums (by name or number) are accepted as ProtoJSON
parsers accept them. Output omits unset fields,
uses `TASK_STATE_*` / `ROLE_*` names and `Z` timestamps, and never carries v0.3's `kind` or `final`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator, model_validator

from .model import (
    Message,
    Part,
    Role,
    SendConfig,
    TaskState,
    new_id,
)
from .protojson import ProtoJSON, documented_text, parse_role
from .validation import ProtoIn, TaskIdParams, validate

PROTOCOL_VERSION = "1.0"


STATE_NAMES: dict[TaskState, str] = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
    TaskState.UNKNOWN: "TASK_STATE_UNSPECIFIED",
}
_STATE_NUMBERS = {
    0: TaskState.UNKNOWN,
    1: TaskState.SUBMITTED,
    2: TaskState.WORKING,
    3: TaskState.COMPLETED,
    4: TaskState.FAILED,
    5: TaskState.CANCELED,
    6: TaskState.INPUT_REQUIRED,
    7: TaskState.REJECTED,
    8: TaskState.AUTH_REQUIRED,
}
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}


def parse_state(value: Any) -> TaskState:
    """A TaskState from its ProtoJSON name or number; ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value in _STATE_NUMBERS:
        return _STATE_NUMBERS[value]
    if isinstance(value, str) and value in STATES_BY_NAME:
        return STATES_BY_NAME[value]
    raise ValueError(f"unknown task state {value!r}")


class _PartIn(ProtoIn):
    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = None
    has_data: bool = Field(default=False, exclude=True)
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    mediaType: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _mark_data(cls, v: Any) -> Any:
        if isinstance(v, dict):
            v = {**documented_text(v), "has_data": "data" in v}
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> _PartIn:
        present = [
            n
            for n, on in (
                ("text", self.text is not None),
                ("raw", self.raw is not None),
                ("url", self.url is not None),
                ("data", self.has_data),
            )
            if on
        ]
        if len(present) != 1:
            raise ValueError("a part holds exactly one of text, raw, url or data")
        if self.raw is not None:
            try:
                base64.b64decode(self.raw, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("raw must be base64-encoded") from exc
        return self


class _MessageIn(ProtoIn):
    """`messageId` and `role` may be left out (as documents do): a message from the user, its id made here."""

    messageId: str | None = Field(default=None, min_length=1, max_length=256)
    role: Any = Role.USER
    parts: list[_PartIn] = Field(min_length=1)
    contextId: str | None = Field(default=None, max_length=256)
    taskId: str | None = Field(default=None, max_length=256)
    referenceTaskIds: list[str] = Field(default_factory=list)
    extensions: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None

    @field_validator("role")
    @classmethod
    def _role(cls, v: Any) -> Role:
        return parse_role(v)


class _SendConfigIn(ProtoIn):
    acceptedOutputModes: list[str] = Field(default_factory=list)
    historyLength: int | None = Field(default=None, ge=0)
    returnImmediately: bool = False
    taskPushNotificationConfig: dict[str, Any] | None = None


class _SendIn(ProtoIn):
    tenant: str = ""
    message: _MessageIn
    configuration: _SendConfigIn | None = None
    metadata: dict[str, Any] | None = None


class _GetIn(ProtoIn, TaskIdParams):
    tenant: str = ""
    id: str = Field(min_length=1)
    historyLength: int | None = Field(default=None, ge=0)


class _IdIn(ProtoIn, TaskIdParams):
    tenant: str = ""
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class _ListIn(ProtoIn):
    tenant: str = ""
    contextId: str | None = None
    status: Any = None
    pageSize: int | None = Field(default=None, ge=1, le=100)
    pageToken: str | None = None
    historyLength: int | None = Field(default=None, ge=0)
    statusTimestampAfter: str | None = None
    includeArtifacts: bool = False

    @field_validator("status")
    @classmethod
    def _status(cls, v: Any) -> TaskState | None:
        if v in (None, "", 0, "TASK_STATE_UNSPECIFIED"):
            return None
        return parse_state(v)

    @field_validator("statusTimestampAfter")
    @classmethod
    def _timestamp(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        from .model import iso, parse_iso

        try:
            return iso(parse_iso(v))
        except ValueError as exc:
            raise ValueError("must be an ISO-8601 timestamp") from exc


@dataclass(slots=True)
class ListQuery:
    """What a ListTasks caller asked for, in domain terms."""

    context_id: str | None = None
    status: TaskState | None = None
    page_size: int = 50
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool = False


def _part_in(p: _PartIn) -> Part:
    return Part(
        text=p.text,
        raw=base64.b64decode(p.raw) if p.raw is not None else None,
        url=p.url,
        data=p.data if p.has_data else None,
        media_type=p.mediaType,
        filename=p.filename,
        metadata=p.metadata,
    )


def decode_message(m: _MessageIn) -> Message:
    return Message(
        message_id=m.messageId or new_id(),
        role=m.role,
        parts=[_part_in(p) for p in m.parts],
        context_id=m.contextId or None,
        task_id=m.taskId or None,
        reference_task_ids=m.referenceTaskIds,
        extensions=m.extensions,
        metadata=m.metadata,
    )


def decode_send(params: Any) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    """`SendMessage` / `SendStreamingMessage` params → domain message and configuration."""
    p = validate(_SendIn, params)
    cfg = p.configuration or _SendConfigIn()
    config = SendConfig(
        blocking=not cfg.returnImmediately,
        history_length=cfg.historyLength,
        accepted_output_modes=cfg.acceptedOutputModes,
        made_message_id=p.message.messageId is None,
    )
    return decode_message(p.message), config, cfg.taskPushNotificationConfig


def decode_get(params: Any) -> tuple[str, int | None]:
    p = validate(_GetIn, params)
    return p.id, p.historyLength


def decode_id(params: Any) -> str:
    return validate(_IdIn, params).id


def decode_list(params: Any) -> ListQuery:
    p = validate(_ListIn, params)
    return ListQuery(
        context_id=p.contextId or None,
        status=p.status,
        page_size=p.pageSize or 50,
        page_token=p.pageToken or None,
        history_length=p.historyLength,
        status_timestamp_after=p.statusTimestampAfter,
        include_artifacts=p.includeArtifacts,
    )


PRINTER = ProtoJSON(STATE_NAMES, Part.to_store, "parts", reference_task_ids=True, final=False)
encode_message = PRINTER.encode_message
encode_status = PRINTER.encode_status
encode_task = PRINTER.encode_task
encode_event = PRINTER.encode_event
