"""Validating wire input with pydantic models: one way to turn a ValidationError into InvalidParams."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

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
            where = ".".join(str(p) for p in err["loc"]) or what
            problems.append(f"{where}: {err['msg']}")
        raise InvalidParamsError(f"Invalid {what}: " + "; ".join(problems)) from None
