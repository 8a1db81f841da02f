"""The price table (`app/runner/prices.py`): which model a name finds, the cost it makes, PRICE_TABLE_FILE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.protocol.usage import COST_PRICE_TABLE, COST_REPORTED, ModelUsage, Usage
from app.runner.prices import DEFAULT_PRICES, Price, PriceTable, PriceTableError


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("claude-opus-4-8", "claude-opus-4-8"),
        ("claude-opus-4-8[1m]", "claude-opus-4-8"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4@20250514", "claude-opus-4"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("GPT-5", "gpt-5"),
        ("gpt-5-2025-08-07", "gpt-5"),
        ("gpt-5-mini", "gpt-5-mini"),
        ("codex-mini-latest", "codex-mini-latest"),
    ],
)
def test_a_model_is_found_by_its_name_without_prefix_variant_or_date(name: str, key: str) -> None:
    assert PriceTable().find(name) == DEFAULT_PRICES[key]


@pytest.mark.parametrize("name", ["gpt-5.2-codex", "claude-opus-4-9", "gemini-3.8-flash", "fake", ""])
def test_nothing_fuzzier_finds_a_price(name: str) -> None:
    assert PriceTable().find(name) is None


def test_price_fills_only_models_without_a_cost_that_the_table_knows() -> None:
    table = PriceTable({"m": Price(input=2, output=10, cache_read=0.5)})
    usage = Usage(
        (
            ModelUsage("m", input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=200_000),
            ModelUsage("m-unknown", input_tokens=5),
            ModelUsage("m", input_tokens=7, cost_usd=1.0, cost_source=COST_REPORTED),
        ),
        turns=3,
    )
    priced = table.price(usage)
    assert priced.models[0].cost_usd == 2 + 1 + 0.1 and priced.models[0].cost_source == COST_PRICE_TABLE
    assert priced.models[1].cost_usd is None
    assert priced.models[2] == usage.models[2]
    assert priced.turns == 3


def test_cache_prices_default_to_the_input_price() -> None:
    m = ModelUsage("m", cache_read_tokens=1_000_000, cache_write_tokens=1_000_000)
    assert Price(input=3, output=15).cost(m) == 6


def test_the_file_is_merged_over_the_defaults_and_null_removes(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"gpt-fake": {"input": 1, "output": 2}, "gpt-5": None}}))
    table = PriceTable.load(str(path))
    assert table.find("gpt-fake") == Price(1.0, 2.0)
    assert table.find("gpt-5") is None
    assert table.find("claude-opus-4-8") == DEFAULT_PRICES["claude-opus-4-8"]
    path.write_text(json.dumps({"bare": {"input": 1, "output": 2, "cacheRead": 0.1, "cacheWrite": 1.25}}))
    assert PriceTable.load(str(path)).find("bare") == Price(1.0, 2.0, 0.1, 1.25)
    assert "bare" in PriceTable.load(str(path)).to_json()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{", "cannot read"),
        ("[]", "JSON object of models"),
        ('{"m": 3}', "must be an object"),
        ('{"m": {"input": 1}}', "output must be a non-negative number"),
        ('{"m": {"input": -1, "output": 1}}', "input must be a non-negative number"),
        ('{"m": {"input": 1, "output": 1, "cacheRead": "x"}}', "cacheRead"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_problem(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(PriceTableError, match=says):
        PriceTable.load(str(path))
    with pytest.raises(PriceTableError, match="cannot read"):
        PriceTable.load(str(tmp_path / "missing.json"))


def test_the_documented_table_is_the_built_in_one() -> None:
    """docs/operations.md "Usage and cost" shows the table as it is."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[1][:1].isdigit():
            number = [None if c == "—" else float(c) for c in cells[1:]]
            rows[cells[0].strip("`")] = Price(*number)  # type: ignore[arg-type]
    assert rows == DEFAULT_PRICES
