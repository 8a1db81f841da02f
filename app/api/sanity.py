"""What a request may not carry because the database, the JSON writer or an agent's process cannot take it.

- JSON nested more than 100 levels: orjson reads up to 1024 levels but writes at most 254, so a message
  whose metadata nested a few hundred levels was accepted and then failed to be stored or answered.
- A NUL character (U+0000) in a JSON string, a path or a query: PostgreSQL's text cannot hold it and no
  process argument can, so an id or a text with one failed deep inside as an internal error.

Both are refused on arrival (-32600 / HTTP 400) instead; real payloads nest a handful of levels. The path
and query are checked by the guard, the JSON bodies by the bindings as they parse them.
"""

from __future__ import annotations

from typing import Any

from app.protocol.errors import InvalidRequestError

MAX_DEPTH = 100
NUL = "\x00"


def check_json(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise InvalidRequestError when `value` nests deeper than `limit` levels or holds a NUL character."""
    level: list[Any] = [value]
    for _ in range(limit + 1):
        children: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                if any(NUL in key for key in node):
                    raise nul_error()
                children.extend(node.values())
            elif isinstance(node, list):
                children.extend(node)
            elif isinstance(node, str) and NUL in node:
                raise nul_error()
        if not children:
            return
        level = children
    raise InvalidRequestError(f"The request nests JSON more than {limit} levels deep", {"maxDepth": limit})


def nul_error() -> InvalidRequestError:
    return InvalidRequestError("The request holds a NUL character (U+0000), which no field may contain")
