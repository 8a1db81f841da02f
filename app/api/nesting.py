"""A bound on how deeply a request's JSON may nest.

orjson reads up to 1024 levels but writes at most 254, so a message whose metadata nests a few hundred
levels deep was accepted and then failed to be stored or answered (an internal error for the client's
input). Such a request is refused on arrival instead; real payloads nest a handful of levels.
"""

from __future__ import annotations

from typing import Any

from app.protocol.errors import InvalidRequestError

MAX_DEPTH = 100


def check_nesting(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise InvalidRequestError when `value` nests lists and objects deeper than `limit` levels."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
        ]
        if not level:
            return
    if any(isinstance(node, dict | list) for node in level):
        raise InvalidRequestError(
            f"The request nests JSON more than {limit} levels deep", {"maxDepth": limit}
        )
