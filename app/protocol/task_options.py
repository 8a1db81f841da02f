"""A task's own options within its role's limits: the model it runs on (`metadata.model`, one of the role's
`models`) and how long its run may take (`metadata.timeoutS`, in seconds, at most the role's timeout).

A client names them in the metadata of a task's first message. The edge checks them against the role's
`TaskLimits` before anything is stored (`api/ops/admission.py`: -32602 naming the limit), the new task keeps
them in its own metadata (`kept_options`), and every run of the task (the first, one started again after a
restart, a later turn's) reads them from there: a later message may repeat them, never change them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import InvalidParamsError

MODEL_KEY = "model"
TIMEOUT_KEY = "timeoutS"
OPTION_KEYS = (MODEL_KEY, TIMEOUT_KEY)
SKILL_KEY = "skill"
"""The skill a first message asks for (routing by skill): its task keeps it too, for the console's lists."""


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """What a role lets a task choose."""

    models: tuple[str, ...] = ()
    """The models a task may name (the role's `models`, its own `model` among them); (): no choice."""
    timeout_s: float = 3600.0
    """The role's run timeout (its `timeout_s`, AGENT_TIMEOUT_S): the most a task may ask for."""
    role: str = "default"

    def check(self, metadata: dict[str, Any] | None) -> None:
        """Refuse (-32602, naming the limit) a model outside `models` or a timeout that is not a number of
        seconds above 0 and at most `timeout_s`."""
        metadata = metadata or {}
        if MODEL_KEY in metadata:
            model = metadata[MODEL_KEY]
            if not isinstance(model, str) or model not in self.models:
                allowed = ", ".join(self.models)
                why = (
                    f"the role {self.role!r} allows the models {allowed}"
                    if self.models
                    else f"the role {self.role!r} offers no choice of model (its `models` lists none)"
                )
                raise InvalidParamsError(
                    f"metadata.model {_shown(model)} is not allowed: {why}",
                    {"field": f"metadata.{MODEL_KEY}", "allowedModels": ",".join(self.models)},
                )
        if TIMEOUT_KEY in metadata:
            value = metadata[TIMEOUT_KEY]
            if not _seconds(value) or not 0 < value <= self.timeout_s:
                raise InvalidParamsError(
                    f"metadata.timeoutS must be a number of seconds above 0 and at most {self.timeout_s:g}, "
                    f"the timeout of the role {self.role!r}; it is {_shown(value)}",
                    {"field": f"metadata.{TIMEOUT_KEY}", "maxTimeoutS": self.timeout_s},
                )

    def same(self, kept: dict[str, Any] | None, metadata: dict[str, Any] | None) -> None:
        """A later message of a task may repeat its options, never change them (-32602 naming the task's)."""
        kept, metadata = kept or {}, metadata or {}
        for key in OPTION_KEYS:
            if key in metadata and metadata[key] != kept.get(key):
                chosen = f"{kept[key]!r}" if key in kept else "the role's own"
                raise InvalidParamsError(
                    f"metadata.{key} is chosen by a task's first message, and this task's is {chosen}: "
                    "start a new task for another",
                    {"field": f"metadata.{key}"},
                )


def _seconds(value: Any) -> bool:
    """A JSON number (not a boolean, not NaN or infinite; an integer of any size)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _shown(value: Any) -> str:
    """A client's value in an error, cut short."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's limit on digits
        return "a number too long to show"
    return text if len(text) <= 80 else text[:79] + "…"


def kept_options(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The options a (checked) first message names, and the skill it asks for, for its task's metadata."""
    kept = {k: metadata[k] for k in OPTION_KEYS if k in (metadata or {})}
    skill = (metadata or {}).get(SKILL_KEY)
    return {**kept, SKILL_KEY: skill} if isinstance(skill, str) else kept


def chosen_model(metadata: dict[str, Any] | None) -> str | None:
    """The model a task chose (its metadata's), None: the role's own."""
    model = (metadata or {}).get(MODEL_KEY)
    return model if isinstance(model, str) else None


def run_timeout(metadata: dict[str, Any] | None, limit: float) -> float:
    """How long a run of the task may take: its own timeout when it chose one below `limit`, else `limit`."""
    value = (metadata or {}).get(TIMEOUT_KEY)
    if _seconds(value) and 0 < value < limit:
        return float(value)
    return limit
