"""The price table: what a model's tokens cost, for the runs whose agent reports tokens but no cost.

USD per million tokens, per model: `input` (uncached prompt tokens), `output`, `cacheRead` and `cacheWrite`
(either left out: the input price). `DEFAULT_PRICES` holds the providers' public list prices of the models
the CLIs use, standard tier, prompts under any long-context surcharge, as they were when written (dated
below); prices change, so check them and set your own with `PRICE_TABLE_FILE`: a JSON object of models
(or `{"models": {...}}`) merged over the defaults, an entry `null` removing one. docs/operations.md "Usage
and cost" shows the table.

A model is found by its name as reported, without a provider prefix (`models/`, `openai/`), a variant
marker (`[1m]`) or letter case; else without a date suffix (`-20250514`, `-2025-08-07`, `@20250514`) or
`-latest`. Nothing fuzzier: a model the table does not name has no cost (`costUsd` null) rather than
another model's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.protocol.usage import COST_DIGITS, COST_PRICE_TABLE, ModelUsage, Usage

PRICES_AS_OF = "2025-09"


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, m: ModelUsage) -> float:
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = (
            m.input_tokens * self.input
            + m.output_tokens * self.output
            + m.cache_read_tokens * read
            + m.cache_write_tokens * write
        )
        return round(total / 1_000_000, COST_DIGITS)


DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic (anthropic.com/pricing): cache writes are the 5-minute cache's.
    "claude-opus-4-8": Price(5, 25, 0.5, 6.25),  # as Claude Code 2.1.197 itself prices it
    "claude-opus-4-5": Price(5, 25, 0.5, 6.25),
    "claude-opus-4-1": Price(15, 75, 1.5, 18.75),
    "claude-opus-4": Price(15, 75, 1.5, 18.75),
    "claude-sonnet-4-5": Price(3, 15, 0.3, 3.75),
    "claude-sonnet-4": Price(3, 15, 0.3, 3.75),
    "claude-3-7-sonnet": Price(3, 15, 0.3, 3.75),
    "claude-haiku-4-5": Price(1, 5, 0.1, 1.25),
    "claude-3-5-haiku": Price(0.8, 4, 0.08, 1),
    # OpenAI (openai.com/api/pricing): cached input; no separate cache writes.
    "gpt-5": Price(1.25, 10, 0.125),
    "gpt-5-codex": Price(1.25, 10, 0.125),
    "gpt-5-mini": Price(0.25, 2, 0.025),
    "gpt-5-nano": Price(0.05, 0.4, 0.005),
    "codex-mini-latest": Price(1.5, 6, 0.375),
    "gpt-4.1": Price(2, 8, 0.5),
    "gpt-4.1-mini": Price(0.4, 1.6, 0.1),
    "gpt-4o": Price(2.5, 10, 1.25),
    "o3": Price(2, 8, 0.5),
    "o4-mini": Price(1.1, 4.4, 0.275),
    # Google (ai.google.dev/pricing): prompts up to 200k tokens; context caching's read price.
    "gemini-2.5-pro": Price(1.25, 10, 0.31),
    "gemini-2.5-flash": Price(0.3, 2.5, 0.075),
    "gemini-2.5-flash-lite": Price(0.1, 0.4, 0.025),
    "gemini-2.0-flash": Price(0.1, 0.4, 0.025),
}

_PROVIDER = re.compile(r"^(?:[a-z0-9_.-]+/)+")
_VARIANT = re.compile(r"\[[^\]]*\]$")
_DATED = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-latest)$")


class PriceTableError(ValueError):
    """PRICE_TABLE_FILE cannot be read as a price table."""


class PriceTable:
    """Prices by model; `price` fills in the cost of the models a report gives no cost for."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = {k.lower(): v for k, v in (DEFAULT_PRICES if prices is None else prices).items()}

    @classmethod
    def load(cls, path: str | None) -> PriceTable:
        """The defaults, with the file's entries over them (PriceTableError, one line, when it is bad)."""
        prices = dict(DEFAULT_PRICES)
        if not path:
            return cls(prices)
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise PriceTableError(f"cannot read {path}: {exc}") from None
        models = data.get("models", data) if isinstance(data, dict) else None
        if not isinstance(models, dict):
            raise PriceTableError(f"{path} must hold a JSON object of models (or {{'models': {{...}}}})")
        for name, entry in models.items():
            if entry is None:
                prices.pop(name, None)
                continue
            prices[name] = _price(path, name, entry)
        return cls(prices)

    def find(self, model: str) -> Price | None:
        name = _VARIANT.sub("", _PROVIDER.sub("", model.strip().lower()))
        found = self._prices.get(name)
        if found is None and (undated := _DATED.sub("", name)) != name:
            found = self._prices.get(undated)
        return found

    def price(self, usage: Usage) -> Usage:
        """The report with a price-table cost for each model that has tokens, no reported cost, and a
        price here."""
        models = []
        changed = False
        for m in usage.models:
            price = self.find(m.model) if m.cost_usd is None and m.model else None
            if price is not None:
                m = replace(m, cost_usd=price.cost(m), cost_source=COST_PRICE_TABLE)
                changed = True
            models.append(m)
        return replace(usage, models=tuple(models)) if changed else usage

    def to_json(self) -> dict[str, dict[str, float]]:
        """The table as PRICE_TABLE_FILE writes it."""
        out = {}
        for name, p in sorted(self._prices.items()):
            entry = {"input": p.input, "output": p.output}
            if p.cache_read is not None:
                entry["cacheRead"] = p.cache_read
            if p.cache_write is not None:
                entry["cacheWrite"] = p.cache_write
            out[name] = entry
        return out


def _price(path: str, name: str, entry: Any) -> Price:
    def number(key: str, required: bool) -> float | None:
        value = entry.get(key)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PriceTableError(f"{path}: model {name!r}: {key} must be a non-negative number")
        return float(value)

    if not isinstance(entry, dict):
        raise PriceTableError(
            f"{path}: model {name!r} must be an object (input, output, cacheRead, cacheWrite)"
        )
    return Price(
        number("input", True) or 0.0,
        number("output", True) or 0.0,
        number("cacheRead", False),
        number("cacheWrite", False),
    )
