"""Push notification configs on the wire: one lenient reader for both versions' shapes, and the redaction
every read applies.

v0.3 writes `authentication: {schemes: [..], credentials}`, v1.0 `authentication: {scheme, credentials}`;
both are read in either version, as are ProtoJSON proto names (`config_id`). A top-level `token` and
`authentication.credentials` may both be given: the token wins when the server builds `Authorization`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import InvalidParamsError
from .model import PushConfig
from .validation import ProtoIn, TaskIdParams, validate

REDACTED = "********"
_SCHEME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _header_value(cls: type, v: str | None) -> str | None:
    """A secret that goes into an HTTP header: no control characters; empty means none."""
    if v and _CONTROL.search(v):
        raise ValueError("must not contain control characters")
    return v or None


class _AuthIn(ProtoIn):
    schemes: list[str] = Field(default_factory=list)
    scheme: str | None = None
    credentials: str | None = Field(default=None, max_length=4096)

    @field_validator("schemes")
    @classmethod
    def _schemes(cls, v: list[str]) -> list[str]:
        for s in v:
            _check_scheme(s)
        return v

    @field_validator("scheme")
    @classmethod
    def _scheme(cls, v: str | None) -> str | None:
        if v:
            _check_scheme(v)
        return v or None

    _credentials = field_validator("credentials")(_header_value)


class PushConfigIn(ProtoIn):
    id: str | None = Field(default=None, max_length=256)
    url: str = Field(min_length=1, max_length=2048)
    token: str | None = Field(default=None, max_length=1024)
    authentication: _AuthIn | None = None
    taskId: str | None = None

    _token = field_validator("token")(_header_value)

    def to_domain(self, version: str) -> PushConfig:
        auth = self.authentication
        scheme = None
        if auth is not None:
            scheme = auth.scheme or (auth.schemes[0] if auth.schemes else None)
        return PushConfig(
            url=self.url,
            id=self.id or "",
            token=self.token,
            scheme=scheme,
            credentials=auth.credentials if auth else None,
            task_id=self.taskId or "",
            version=version,
        )


def _check_scheme(v: str) -> None:
    if not _SCHEME.match(v):
        raise ValueError("an HTTP authentication scheme is one token, such as Bearer")


def decode(data: Any, version: str, what: str = "params") -> PushConfig:
    """A config from its wire object (either version's shape)."""
    return validate(PushConfigIn, data, what).to_domain(version)


def _auth(c: PushConfig, plural: bool) -> dict[str, Any] | None:
    if c.scheme is None and c.credentials is None:
        return None
    scheme = c.scheme or "Bearer"
    out: dict[str, Any] = {"schemes": [scheme]} if plural else {"scheme": scheme}
    if c.credentials:
        out["credentials"] = REDACTED
    return out


def encode_v03(c: PushConfig) -> dict[str, Any]:
    """v0.3 `TaskPushNotificationConfig` (JSON-RPC shapes), secrets redacted."""
    inner: dict[str, Any] = {"id": c.id, "url": c.url}
    if c.token:
        inner["token"] = REDACTED
    auth = _auth(c, plural=True)
    if auth:
        inner["authentication"] = auth
    return {"taskId": c.task_id, "pushNotificationConfig": inner, **delivery_metadata_field(c)}


def encode_v03_proto(c: PushConfig) -> dict[str, Any]:
    """v0.3 REST (proto) `TaskPushNotificationConfig`: a resource `name` and the config, redacted."""
    body = encode_v03(c)
    return {
        "name": f"tasks/{c.task_id}/pushNotificationConfigs/{c.id}",
        "pushNotificationConfig": body["pushNotificationConfig"],
        **delivery_metadata_field(c),
    }


def encode_v10(c: PushConfig) -> dict[str, Any]:
    """v1.0 flat `TaskPushNotificationConfig`, secrets redacted."""
    out: dict[str, Any] = {"id": c.id, "taskId": c.task_id, "url": c.url}
    if c.token:
        out["token"] = REDACTED
    auth = _auth(c, plural=False)
    if auth:
        out["authentication"] = auth
    out.update(delivery_metadata_field(c))
    return out


def delivery_metadata_field(c: PushConfig) -> dict[str, Any]:
    """The delivery outcomes so far, under `metadata.delivery` (not a spec field; readers ignore it)."""
    return {"metadata": {"delivery": c.delivery}} if c.delivery is not None else {}


class _V03RefIn(TaskIdParams):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    pushNotificationConfigId: str | None = None
    metadata: dict[str, Any] | None = None


class _V03SetIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    taskId: str = Field(min_length=1)
    pushNotificationConfig: dict[str, Any]


class _V10RefIn(ProtoIn):
    tenant: str = ""
    taskId: str = Field(min_length=1)
    id: str | None = None
    pageSize: int | None = Field(default=None, ge=1, le=100)
    pageToken: str | None = None


def decode_v03_set(params: Any) -> PushConfig:
    """`tasks/pushNotificationConfig/set` params → the config, with its task id."""
    p = validate(_V03SetIn, params)
    cfg = decode(p.pushNotificationConfig, "0.3", "params.pushNotificationConfig")
    cfg.task_id = p.taskId
    return cfg


def decode_v03_ref(params: Any, need_config: bool = False) -> tuple[str, str | None]:
    """`{id, pushNotificationConfigId?}` → (task id, config id)."""
    p = validate(_V03RefIn, params)
    if need_config and not p.pushNotificationConfigId:
        raise InvalidParamsError("Invalid params: pushNotificationConfigId: Field required")
    return p.id, p.pushNotificationConfigId or None


def decode_v10_create(params: Any) -> PushConfig:
    """`CreateTaskPushNotificationConfig` params: the flat config with its `taskId`."""
    if isinstance(params, dict) and not params.get("taskId") and not params.get("task_id"):
        raise InvalidParamsError("Invalid params: taskId: Field required")
    return decode(params, "1.0")


def decode_v10_ref(params: Any, need_config: bool = False) -> tuple[str, str | None, int | None, str | None]:
    """`{taskId, id?, pageSize?, pageToken?}` → (task id, config id, page size, page token)."""
    p = validate(_V10RefIn, params)
    if need_config and not p.id:
        raise InvalidParamsError("Invalid params: id: Field required")
    return p.taskId, p.id or None, p.pageSize, p.pageToken or None
