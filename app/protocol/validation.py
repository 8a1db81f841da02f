"""Validating wire input with pydantic models: one way to turn a ValidationError into InvalidParams, and the
base of the ProtoJSON input models, which take each field under either of its two names."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .errors import InvalidParamsError

M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, what: str = "params") -> M:
    """`data` as `model`; a missing object counts as empty. The error names up to five bad fields."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidParamsError(f"{what} must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False)[:5]:
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {msg}" if where else msg)
        raise InvalidParamsError(f"Invalid {what}: " + "; ".join(problems)) from None


def camel(proto_name: str) -> str:
    """The ProtoJSON (lowerCamelCase) name of a proto field name: `history_length` → `historyLength`."""
    head, *rest = proto_name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def snake(json_name: str) -> str:
    """The proto field name of a ProtoJSON name: `historyLength` → `history_length`."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in json_name)


class ProtoIn(BaseModel):
    """A ProtoJSON input message: each field is read under its JSON name (`historyLength`) or its proto
    field name (`history_length`), as ProtoJSON parsers do; both with different values is an error.

    Only the model's own fields are renamed, so free-form objects (`metadata`, a part's `data`) keep their
    keys; nested messages are models of this kind and rename their own fields. Unknown fields are ignored.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _proto_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        renames = {
            key: camel(key)
            for key in data
            if isinstance(key, str)
            and "_" in key
            and key not in fields
            and camel(key) in fields
            and snake(camel(key)) == key
        }
        if not renames:
            return data
        out = {k: v for k, v in data.items() if k not in renames}
        for key, name in renames.items():
            if name in out and out[name] != data[key]:
                raise ValueError(f"{key} and {name} name the same field; they were given different values")
            out[name] = data[key]
        return out


TASK_ID_ALIASES = ("taskId", "task_id")
"""Other names of a task id param `id` (tasks/get, tasks/cancel, ...) that documents and clients write."""


def one_task_id(data: Any) -> Any:
    """`data` with a task id given as `taskId` or `task_id` moved to `id`; names that disagree are refused."""
    if not isinstance(data, dict) or not any(alias in data for alias in TASK_ID_ALIASES):
        return data
    given = {name: data[name] for name in ("id", *TASK_ID_ALIASES) if name in data}
    first, *rest = given.values()
    if any(type(v) is not type(first) or v != first for v in rest):
        raise ValueError(f"{', '.join(given)} name the same task; they were given different values")
    out = {k: v for k, v in data.items() if k not in TASK_ID_ALIASES}
    out["id"] = first
    return out


class TaskIdParams(BaseModel):
    """Params whose `id` is a task id: also read as `taskId` or `task_id` (`one_task_id`)."""

    @model_validator(mode="before")
    @classmethod
    def _task_id_aliases(cls, data: Any) -> Any:
        return one_task_id(data)
