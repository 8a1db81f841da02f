"""Paths as the bindings know them: a role's endpoints live under `/agents/{role}/`, the same routes as the
root's (the default role's) below that prefix. What decides by path (the guard's public paths, the error
shape of a refused request, the metrics' binding label) looks at the route path without the prefix, and
the paths it decides by are named here."""

from __future__ import annotations

ROLE_PREFIX = "/agents/"
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
"""The v0.3 name of the card's path (served as an alias)."""
CARD_PATHS = frozenset({CARD_PATH, LEGACY_CARD_PATH})
METRICS_PATH = "/metrics"
OPS_PATHS = frozenset({"/healthz", "/readyz", METRICS_PATH})
PUBLIC_PATHS = CARD_PATHS | OPS_PATHS
"""What needs no credential (besides the console's page and assets, `console.is_public`)."""
JSONRPC_PATHS = frozenset({"/a2a", "/a2a/jsonrpc"})
WORKER_PATHS = "/workers/"
"""Remote workers' endpoints: a worker credential only, and it nowhere else."""


def route_path(path: str) -> str:
    """`path` without a `/agents/{role}` prefix (`/agents/r/a2a/jsonrpc` → `/a2a/jsonrpc`)."""
    if path.startswith(ROLE_PREFIX):
        _, sep, tail = path[len(ROLE_PREFIX) :].partition("/")
        if sep:
            return "/" + tail
    return path
