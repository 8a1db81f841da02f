"""The v0.3 HTTP+JSON codec: ProtoJSON of the v0.3 gRPC proto (package `a2a.v1`), not the JSON-RPC shapes.

The v0.3 REST binding (`/v1/...`) carries the proto's messages: a Message holds `content` (not `parts`),
roles are `ROLE_USER` / `ROLE_AGENT`, states `TASK_STATE_*` with `TASK_STATE_CANCELLED` (two Ls), parts are
`{"text"}` | `{"file": {"fileWithUri" | "fileWithBytes", "mimeType", "name"}}` | `{"data": {"data": {..}}}`,
and responses are `SendMessageResponse` / `StreamResponse` oneofs (`task`, `message`, `statusUpdate`,
`artifactUpdate`).

Input accepts both ProtoJSON spellings of every field, the JSON name (`messageId`, `message`) and the proto
name (`message_id`, `request`): the official Python client sends proto names, the JavaScript one JSON names.
Enums are accepted by name or number; unknown fields are ignored. Output uses JSON names and omits unset
fields, as ProtoJSON printers do. Part `metadata` and file `name` are not in the v0.3.0 proto but are in
the one the official SDKs ship, whose parsers read them (and others ignore unknown fields).

A file's bytes: the official v0.3 SDKs (Python's, Java's, Go's, and the A2A interop kit) put the file's
base64 *text* in the proto's `bytes file_with_bytes`, so its ProtoJSON is that text base64-encoded again
(gRPC carries the same proto). The server writes that (`encode_part`): the Python client decodes a raw
patch from it, where a single encoding gave it garbage. It reads both: the outer base64, then the inner one
when what the outer gave is strict base64 text (`_file_bytes`); anything else (what @a2a-js/sdk sends: the
file's own bytes) is taken as it is.

Proto3 semantics the reference server follows: `configuration.blocking` defaults to false, so a send that
carries a `configuration` without `blocking: true` does not wait (a send without `configuration` does), and
`configuration.historyLength` 0 means "all history".
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from . import pushconfig
from .errors import InvalidParamsError
from .model import (
    Message,
    Part,
    PushConfig,
    Role,
    SendConfig,
    TaskState,
    new_id,
)
from .protojson import ProtoJSON, documented_text, parse_role
from .validation import validate

STATE_NAMES: dict[TaskState, str] = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELLED",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
    TaskState.UNKNOWN: "TASK_STATE_UNSPECIFIED",
}

# The AgentCard fields of the v0.3 proto (JSON names): what `GET /v1/card` keeps of the served card.
_CARD_FIELDS = (
    "protocolVersion",
    "name",
    "description",
    "url",
    "preferredTransport",
    "additionalInterfaces",
    "provider",
    "iconUrl",
    "version",
    "documentationUrl",
    "capabilities",
    "securitySchemes",
    "security",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "supportsAuthenticatedExtendedCard",
    "signatures",
)
_CAPABILITY_FIELDS = ("streaming", "pushNotifications", "extensions")


def _either(json_name: str, proto_name: str, **kw: Any) -> Any:
    """A field read under its ProtoJSON JSON name or its proto field name."""
    if "default_factory" not in kw:
        kw.setdefault("default", None)
    return Field(validation_alias=AliasChoices(json_name, proto_name), **kw)


def _b64decode(value: str) -> bytes:
    """ProtoJSON `bytes`: standard or URL-safe base64, padding optional."""
    s = value.strip().replace("-", "+").replace("_", "/")
    return base64.b64decode(s + "=" * (-len(s) % 4), validate=True)


def _file_bytes(value: str) -> bytes:
    """A file part's bytes from `fileWithBytes` (module docstring): the SDKs' base64 text inside the
    ProtoJSON base64, or, when the inside is no strict base64 text, the file's bytes themselves."""
    outer = _b64decode(value)
    if not outer or len(outer) % 4:
        return outer
    try:
        return base64.b64decode(outer, validate=True)
    except binascii.Error:
        return outer


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _FileIn(_In):
    fileWithUri: str | None = _either("fileWithUri", "file_with_uri")
    fileWithBytes: str | None = _either("fileWithBytes", "file_with_bytes")
    mimeType: str | None = _either("mimeType", "mime_type")
    name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> _FileIn:
        if (self.fileWithUri is None) == (self.fileWithBytes is None):
            raise ValueError("a file holds exactly one of fileWithUri or fileWithBytes")
        if self.fileWithUri is not None and not self.fileWithUri:
            raise ValueError("fileWithUri must not be empty")
        if self.fileWithBytes is not None:
            try:
                _b64decode(self.fileWithBytes)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("fileWithBytes must be base64-encoded") from exc
        return self


class _DataIn(_In):
    data: dict[str, Any] = Field(default_factory=dict)


class _PartIn(_In):
    text: str | None = None
    file: _FileIn | None = None
    data: _DataIn | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _documented(cls, v: Any) -> Any:
        return documented_text(v) if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _exactly_one(self) -> _PartIn:
        if sum(x is not None for x in (self.text, self.file, self.data)) != 1:
            raise ValueError("a part holds exactly one of text, file or data")
        return self


class _MessageIn(_In):
    """`messageId` and `role` may be left out (as documents do): a message from the user, its id made here."""

    messageId: str | None = _either("messageId", "message_id", min_length=1, max_length=256)
    contextId: str | None = _either("contextId", "context_id", max_length=256)
    taskId: str | None = _either("taskId", "task_id", max_length=256)
    role: Any = Role.USER
    content: list[_PartIn] = Field(min_length=1)
    metadata: dict[str, Any] | None = None
    extensions: list[str] = Field(default_factory=list)

    @field_validator("role")
    @classmethod
    def _role(cls, v: Any) -> Role:
        return parse_role(v)


class _SendConfigIn(_In):
    acceptedOutputModes: list[str] = _either(
        "acceptedOutputModes", "accepted_output_modes", default_factory=list
    )
    pushNotification: dict[str, Any] | None = _either("pushNotification", "push_notification")
    historyLength: int | None = _either("historyLength", "history_length", ge=0)
    blocking: bool = False


class _SendIn(_In):
    message: _MessageIn = _either("message", "request", default=...)
    configuration: _SendConfigIn | None = None
    metadata: dict[str, Any] | None = None


def _part_in(p: _PartIn) -> Part:
    if p.text is not None:
        return Part(text=p.text, metadata=p.metadata)
    if p.data is not None:
        return Part(data=p.data.data, metadata=p.metadata)
    f = p.file
    assert f is not None
    if f.fileWithBytes is not None:
        return Part(
            raw=_file_bytes(f.fileWithBytes),
            media_type=f.mimeType or None,
            filename=f.name or None,
            metadata=p.metadata,
        )
    return Part(
        url=f.fileWithUri, media_type=f.mimeType or None, filename=f.name or None, metadata=p.metadata
    )


def decode_message(m: _MessageIn) -> Message:
    return Message(
        message_id=m.messageId or new_id(),
        role=m.role,
        parts=[_part_in(p) for p in m.content],
        context_id=m.contextId or None,
        task_id=m.taskId or None,
        extensions=m.extensions,
        metadata=m.metadata or None,
    )


def decode_send(body: Any) -> tuple[Message, SendConfig, dict[str, Any] | None]:
    """A `SendMessageRequest` body → domain message, configuration and the push config asked for."""
    p = validate(_SendIn, body, "body")
    cfg = p.configuration
    config = SendConfig(
        blocking=cfg is None or cfg.blocking,
        history_length=(cfg.historyLength or None) if cfg else None,
        accepted_output_modes=cfg.acceptedOutputModes if cfg else [],
        made_message_id=p.message.messageId is None,
    )
    return decode_message(p.message), config, cfg.pushNotification if cfg else None


def encode_part(p: Part) -> dict[str, Any]:
    if p.text is not None:
        out: dict[str, Any] = {"text": p.text}
    elif p.raw is not None or p.url is not None:
        f: dict[str, Any] = (
            {"fileWithBytes": base64.b64encode(base64.b64encode(p.raw)).decode()}
            if p.raw is not None
            else {"fileWithUri": p.url}
        )
        if p.media_type:
            f["mimeType"] = p.media_type
        if p.filename:
            f["name"] = p.filename
        out = {"file": f}
    else:
        out = {"data": {"data": p.data if isinstance(p.data, dict) else {"value": p.data}}}
    if p.metadata:
        out["metadata"] = p.metadata
    return out


PRINTER = ProtoJSON(STATE_NAMES, encode_part, "content", reference_task_ids=False, final=True)
encode_message = PRINTER.encode_message
encode_task = PRINTER.encode_task
encode_event = PRINTER.encode_event


def encode_card(card: dict[str, Any]) -> dict[str, Any]:
    """The served agent card (v0.3 JSON fields) as the v0.3 proto's AgentCard: other fields dropped."""
    out = {k: card[k] for k in _CARD_FIELDS if k in card}
    if isinstance(out.get("capabilities"), dict):
        out["capabilities"] = {k: v for k, v in out["capabilities"].items() if k in _CAPABILITY_FIELDS}
    return out


def decode_push_create(params: dict[str, Any]) -> PushConfig:
    """A `CreateTaskPushNotificationConfigRequest` (`{parent: "tasks/{id}", configId, config: {name,
    pushNotificationConfig}}`, JSON or proto names), or just the `TaskPushNotificationConfig` or the config
    beside `parent` → the config, with the task id of `parent`."""
    body = params
    config_id = body.get("configId") or body.get("config_id")
    outer = body.get("config")
    if isinstance(outer, dict):
        body = outer
    inner = body.get("pushNotificationConfig", body.get("push_notification_config", body))
    if not isinstance(inner, dict):
        raise InvalidParamsError("Invalid body: config.pushNotificationConfig must be an object")
    if config_id and not inner.get("id"):
        inner = {**inner, "id": config_id}
    cfg = pushconfig.decode(inner, "0.3", "body")
    cfg.task_id = str(params["parent"]).removeprefix("tasks/")
    return cfg
