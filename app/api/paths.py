"""Paths as the bindings know them: a role's endpoints live under `/agents/{role}/`, the same routes as the
root's (the default role's) below that prefix. What decides by path (the guard's public paths, the error
shape of a refused request, the metrics' binding label) looks at the route path without the prefix."""

from __future__ import annotations

ROLE_PREFIX = "/agents/"


def route_path(path: str) -> str:
    """`path` without a `/agents/{role}` prefix (`/agents/r/a2a/jsonrpc` → `/a2a/jsonrpc`)."""
    if path.startswith(ROLE_PREFIX):
        _, sep, tail = path[len(ROLE_PREFIX) :].partition("/")
        if sep:
            return "/" + tail
    return path
