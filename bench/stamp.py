"""The `stamp:<count>:<interval_ms>:<delay_ms>` script: our bench agent's and the reference executor's."""

from __future__ import annotations

STAMP = "stamp:"
DEFAULT_COUNT = 200
DEFAULT_INTERVAL_MS = 5.0
DEFAULT_DELAY_MS = 500.0


def stamp_text(count: int, interval_ms: float, delay_ms: float) -> str:
    """The message text asking for `count` stamped chunks `interval_ms` apart after `delay_ms`."""
    return f"{STAMP}{count}:{interval_ms:g}:{delay_ms:g}"


def parse_stamp(text: str) -> tuple[int, float, float]:
    """`stamp:<count>:<interval_ms>:<delay_ms>` → (count, interval s, delay s); missing fields default."""
    fields = [f for f in text.removeprefix(STAMP).split(":") if f.strip()]
    count = int(fields[0]) if fields else DEFAULT_COUNT
    interval_ms = float(fields[1]) if len(fields) > 1 else DEFAULT_INTERVAL_MS
    delay_ms = float(fields[2]) if len(fields) > 2 else DEFAULT_DELAY_MS
    return count, interval_ms / 1000, delay_ms / 1000
