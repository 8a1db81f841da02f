"""What an agent's run used: tokens per model, cost, wall time, agent turns and tool calls.

A run reports a `Usage` (`TaskContext.usage`, or `usage=` on the call that ends or pauses its turn): one
`ModelUsage` per model it called, and the run's wall time, agent turns and tool calls. The report rides in
the metadata of the status-update that carries it, under `USAGE_KEY` (`Usage.to_wire`); the task's metadata
holds the sum of all its reports under the same key (`add_to_summary`), so every A2A client sees it.

Token counts mean the same whatever the CLI (each adapter maps its CLI's report):

- `input_tokens`: prompt tokens billed at the full input price, neither read from nor written to a cache;
- `cache_read_tokens`, `cache_write_tokens`: prompt tokens read from, or written to, the provider's cache;
- `output_tokens`: generated tokens, reasoning included.

`cost_usd` is what the agent (its CLI) reported (`cost_source` "reported"), else what the price table makes
of the tokens ("price-table", filled in by the server), else unknown (None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

USAGE_KEY = "usage"
"""The key of a report in a status-update's metadata, and of the task's sum in the task's metadata."""
CHILD_USAGE_KEY = "childUsage"
"""The key of a child task's usage in a status-update's metadata (`{"taskId", "usage"}`: the child's summary),
which the run of its parent emits once the child ended (agents calling agents): added to the parent's
`usage.children`, never a report of its own (the child's reports are counted where it recorded them)."""
CHILDREN_KEY = "children"
"""In a task's usage summary: the sum of its ended children's summaries (theirs with their own children)."""
COUNTED_KEY = "childTasks"
"""In a task's usage summary: the ids of the children summed into `children`, so each is added once."""
COST_REPORTED = "reported"
COST_PRICE_TABLE = "price-table"
COST_MIXED = "mixed"
"""A model's cost in a sum whose parts came from both sources."""
MAX_MODELS = 16
"""Most models one report may name (a report naming more is refused)."""
MAX_MODEL_NAME = 200
MAX_COUNT = 10**15
"""Largest token count (or milliseconds, turns, tool calls) a report may carry."""
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
COST_DIGITS = 10
"""Costs are rounded to this many decimals as they are summed (float sums stay readable)."""


class UsageError(ValueError):
    """A report that is not a usage report (wrong types, negative or absurd numbers)."""


def _count(value: Any, name: str, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise UsageError(f"{name} must be a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            raise UsageError(f"{name} must be a whole number")
        value = int(value)
    if value < 0 or value > MAX_COUNT:
        raise UsageError(f"{name} is out of range")
    return value


def _cost(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UsageError("costUsd must be a non-negative number")
    return float(value)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What one model did in one report."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    cost_source: str | None = None
    """`reported`, `price-table`, or None while the cost is unknown."""

    def tokens(self, kind: str) -> int:
        """The count of one of `TOKEN_KINDS`."""
        return int(getattr(self, f"{kind}_tokens"))

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheReadTokens": self.cache_read_tokens,
            "cacheWriteTokens": self.cache_write_tokens,
            "costUsd": self.cost_usd,
        }
        if self.cost_source is not None:
            out["costSource"] = self.cost_source
        return out

    @classmethod
    def from_wire(cls, d: Any) -> ModelUsage:
        if not isinstance(d, Mapping):
            raise UsageError("a model's usage must be an object")
        model = d.get("model", "")
        if not isinstance(model, str) or len(model) > MAX_MODEL_NAME:
            raise UsageError(f"model must be a string of at most {MAX_MODEL_NAME} characters")
        cost = _cost(d.get("costUsd"))
        source = d.get("costSource")
        if source not in (None, COST_REPORTED, COST_PRICE_TABLE, COST_MIXED):
            raise UsageError("costSource must be 'reported', 'price-table' or 'mixed'")
        return cls(
            model=model,
            input_tokens=_count(d.get("inputTokens"), "inputTokens") or 0,
            output_tokens=_count(d.get("outputTokens"), "outputTokens") or 0,
            cache_read_tokens=_count(d.get("cacheReadTokens"), "cacheReadTokens") or 0,
            cache_write_tokens=_count(d.get("cacheWriteTokens"), "cacheWriteTokens") or 0,
            cost_usd=cost,
            cost_source=None if cost is None else (source or COST_REPORTED),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """One report of a run: the models it called, and (None: not reported) its wall time in milliseconds,
    agent turns (model round trips, as the CLI counts them) and tool calls.

    When an agent leaves `wall_ms` or `tool_calls` unset, the server fills them in: the run's time since its
    start or its previous report, not counting time waiting for the user's answer, and the tool calls it
    announced meanwhile (`TaskContext.tool_call`)."""

    models: tuple[ModelUsage, ...] = ()
    wall_ms: int | None = None
    turns: int | None = None
    tool_calls: int | None = None

    @classmethod
    def of(
        cls,
        model: str = "",
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cost_usd: float | None = None,
        wall_ms: int | None = None,
        turns: int | None = None,
        tool_calls: int | None = None,
    ) -> Usage:
        """A report of one model (the common case): `Usage.of("gpt-5", input_tokens=10, output_tokens=5)`."""
        one = ModelUsage(
            model,
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            cost_usd,
            COST_REPORTED if cost_usd is not None else None,
        )
        return cls((one,), wall_ms, turns, tool_calls)

    @property
    def cost_usd(self) -> float | None:
        """The report's cost: the sum of the models' known costs (None when none is known)."""
        known = [m.cost_usd for m in self.models if m.cost_usd is not None]
        return round(sum(known), COST_DIGITS) if known else None

    def tokens(self, kind: str) -> int:
        return sum(m.tokens(kind) for m in self.models)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"models": [m.to_wire() for m in self.models]}
        for key, value in (("wallMs", self.wall_ms), ("turns", self.turns), ("toolCalls", self.tool_calls)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_wire(cls, d: Any) -> Usage:
        """A report from its wire form; UsageError when it is not one. The same model named twice is
        one entry (its numbers added)."""
        if not isinstance(d, Mapping):
            raise UsageError("a usage report must be an object")
        models = d.get("models", [])
        if not isinstance(models, list) or len(models) > MAX_MODELS:
            raise UsageError(f"models must be a list of at most {MAX_MODELS} entries")
        merged: dict[str, ModelUsage] = {}
        for m in (ModelUsage.from_wire(x) for x in models):
            merged[m.model] = _add_model(merged[m.model], m) if m.model in merged else m
        return cls(
            tuple(merged.values()),
            _count(d.get("wallMs"), "wallMs", optional=True),
            _count(d.get("turns"), "turns", optional=True),
            _count(d.get("toolCalls"), "toolCalls", optional=True),
        )

    def normalised(self) -> Usage:
        """The report as it is stored: through its wire form, so it is one valid shape whoever built it."""
        return Usage.from_wire(self.to_wire())

    def with_defaults(self, wall_ms: int, tool_calls: int) -> Usage:
        """Wall time and tool calls filled in where the report leaves them unset."""
        return replace(
            self,
            wall_ms=wall_ms if self.wall_ms is None else self.wall_ms,
            tool_calls=tool_calls if self.tool_calls is None else self.tool_calls,
        )


def _add_model(a: ModelUsage, b: ModelUsage) -> ModelUsage:
    cost = None if a.cost_usd is None and b.cost_usd is None else (a.cost_usd or 0.0) + (b.cost_usd or 0.0)
    sources = {s for s in (a.cost_source, b.cost_source) if s}
    return ModelUsage(
        a.model,
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cache_read_tokens + b.cache_read_tokens,
        a.cache_write_tokens + b.cache_write_tokens,
        None if cost is None else round(cost, COST_DIGITS),
        None if not sources else sources.pop() if len(sources) == 1 else COST_MIXED,
    )


_TOTALS = (
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "wallMs",
    "turns",
    "toolCalls",
)


def empty_summary() -> dict[str, Any]:
    return {
        "reports": 0,
        **dict.fromkeys(_TOTALS, 0),
        "costUsd": None,
        "models": {},
    }


def add_to_summary(summary: Mapping[str, Any] | None, usage: Usage) -> dict[str, Any]:
    """A task's usage (the sum of its reports, as in its metadata) with one more report added.

    `{"reports", "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "costUsd", "wallMs",
    "turns", "toolCalls", "models": {model: {"inputTokens", ..., "costUsd", "costSource"}}}`; `costUsd` sums
    the costs known (None while none is), a model whose cost is unknown has `costUsd` None in `models`."""
    out = _copy(summary)
    out["reports"] += 1
    out["inputTokens"] += usage.tokens("input")
    out["outputTokens"] += usage.tokens("output")
    out["cacheReadTokens"] += usage.tokens("cache_read")
    out["cacheWriteTokens"] += usage.tokens("cache_write")
    out["wallMs"] += usage.wall_ms or 0
    out["turns"] += usage.turns or 0
    out["toolCalls"] += usage.tool_calls or 0
    if (cost := usage.cost_usd) is not None:
        out["costUsd"] = round((out["costUsd"] or 0.0) + cost, COST_DIGITS)
    for m in usage.models:
        before = out["models"].get(m.model)
        mine = ModelUsage.from_wire({"model": m.model, **before}) if before else None
        out["models"][m.model] = _model_sum(_add_model(mine, m) if mine is not None else m)
    return out


def _copy(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """A summary as `empty_summary` shapes it, with what `summary` holds (its children's sum kept)."""
    out = empty_summary()
    if isinstance(summary, Mapping):
        for key in ("reports", *_TOTALS):
            value = summary.get(key)
            out[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
        cost = summary.get("costUsd")
        out["costUsd"] = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
        models = summary.get("models")
        if isinstance(models, Mapping):
            out["models"] = {k: dict(v) for k, v in models.items() if isinstance(v, Mapping)}
        children = summary.get(CHILDREN_KEY)
        counted = summary.get(COUNTED_KEY)
        if isinstance(children, Mapping) and isinstance(counted, list):
            out[CHILDREN_KEY] = _copy(children)
            out[CHILDREN_KEY].pop(CHILDREN_KEY, None)
            out[COUNTED_KEY] = [c for c in counted if isinstance(c, str)]
    return out


def add_summaries(into: Mapping[str, Any] | None, other: Mapping[str, Any]) -> dict[str, Any]:
    """`into` with the reports, totals, costs and models of another summary added (its children not)."""
    out = _copy(into)
    out.pop(CHILDREN_KEY, None)
    out.pop(COUNTED_KEY, None)
    add = _copy(other)
    out["reports"] += add["reports"]
    for key in _TOTALS:
        out[key] += add[key]
    if add["costUsd"] is not None:
        out["costUsd"] = round((out["costUsd"] or 0.0) + add["costUsd"], COST_DIGITS)
    for name, model in add["models"].items():
        try:
            theirs = ModelUsage.from_wire({**model, "model": name})
            before = out["models"].get(name)
            mine = ModelUsage.from_wire({**before, "model": name}) if before else None
        except UsageError:
            continue
        out["models"][name] = _model_sum(_add_model(mine, theirs) if mine is not None else theirs)
    return out


def add_child(
    summary: Mapping[str, Any] | None, child_id: str, child: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A task's usage summary with an ended child's summary (`child`, its own children's sum included) added
    to its `children`; None when that child is already counted."""
    out = _copy(summary)
    counted = out.get(COUNTED_KEY, [])
    if child_id in counted:
        return None
    children = add_summaries(out.get(CHILDREN_KEY), child)
    grandchildren = _copy(child).get(CHILDREN_KEY)
    if grandchildren is not None:
        children = add_summaries(children, grandchildren)
    out[CHILDREN_KEY] = children
    out[COUNTED_KEY] = [*counted, child_id]
    return out


def _model_sum(m: ModelUsage) -> dict[str, Any]:
    wire = m.to_wire()
    del wire["model"]
    wire["costSource"] = m.cost_source
    return wire
