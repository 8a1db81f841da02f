"""`from_attributes`: an options object (a dataclass) built from the same-named attributes of a settings-like
object, so an options class whose fields are named as its settings lists them once, not again in its
`from_settings`. Every room may import this module: it imports nothing of ours."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def from_attributes(
    cls: type[T], settings: Any, *, prefix: str = "", names: Mapping[str, str] | None = None, **given: Any
) -> T:
    """`cls(...)`: each field in `given` as given; each other one the attribute of `settings` that `names`
    maps it to (fields `names` leaves out keep their defaults), or, without `names`, every field from the
    attribute `prefix` + its name (`max_attempts` from `push_max_attempts`)."""
    if names is None:
        names = {f.name: prefix + f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    read = {name: getattr(settings, attribute) for name, attribute in names.items() if name not in given}
    return cls(**read, **given)
