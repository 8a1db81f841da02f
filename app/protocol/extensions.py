"""An A2A extension as an agent card declares it (`AgentExtension`): the one check of a declaration, for
CARD_EXTENSIONS (the settings validate it) and an agent's own (`Agent.extensions`, checked as the card is
built)."""

from __future__ import annotations

import re
from typing import Any

EXTENSION_FIELDS = ("uri", "description", "required", "params")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s,]+")


def extension_entry(e: Any) -> dict[str, Any]:
    """One declared extension as the card prints it: `uri` (an absolute URI, no comma or space: the header
    lists them comma-separated), `description` if any, `required` (false unless true), `params` if any."""
    if not isinstance(e, dict):
        raise ValueError('each extension must be an object {"uri", "description", "required", "params"}')
    unknown = sorted(set(e) - set(EXTENSION_FIELDS))
    if unknown:
        raise ValueError(f"unknown extension field {unknown[0]!r} (fields: {', '.join(EXTENSION_FIELDS)})")
    uri = e.get("uri")
    if not isinstance(uri, str) or not _URI.fullmatch(uri):
        raise ValueError(f"extension uri {uri!r} must be an absolute URI without spaces or commas")
    if not isinstance(e.get("description", ""), str):
        raise ValueError(f"extension {uri}: description must be a string")
    if not isinstance(e.get("required", False), bool):
        raise ValueError(f"extension {uri}: required must be true or false")
    if e.get("params") is not None and not isinstance(e["params"], dict):
        raise ValueError(f"extension {uri}: params must be a JSON object")
    out: dict[str, Any] = {"uri": uri}
    if e.get("description"):
        out["description"] = e["description"]
    out["required"] = e.get("required", False)
    if e.get("params") is not None:
        out["params"] = e["params"]
    return out
