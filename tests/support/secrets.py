"""The secrets the suite hands to servers (API keys, signed JWTs, worker keys, webhook tokens and
credentials), and the check that none of them reached a log: `tests/conftest.py` scans every `*.log` the
run wrote under its temporary folder when the session ends, and fails the run on a leak."""

from __future__ import annotations

import re
from pathlib import Path

MIN_LENGTH = 6
"""Shorter values (a webhook token `t`) would match anywhere: they are not looked for."""
KNOWN: set[str] = set()


def remember(*values: str) -> None:
    """Look for these in every log at the end of the run."""
    KNOWN.update(v for v in values if len(v) >= MIN_LENGTH)


def leaks(root: Path) -> list[tuple[Path, str]]:
    """Each log file under `root` with the first known secret it shows."""
    if not KNOWN or not root.is_dir():
        return []
    pattern = re.compile("|".join(re.escape(v) for v in sorted(KNOWN, key=len, reverse=True)))
    found = []
    for path in sorted(root.rglob("*.log")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        hit = pattern.search(text)
        if hit:
            found.append((path, hit.group()))
    return found
