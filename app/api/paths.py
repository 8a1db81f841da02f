"""Paths as the bindings know them: every role's endpoints (the default role's too) live under
`/agents/{role}/`, the same routes as the root's (the default role's alias) below that prefix. What decides
by path (the guard's public paths, the error shape of a refused request, the metrics' binding label) looks at
the route path without the prefix, and the paths it decides by are named here."""

from __future__ import annotations

import re

ROLE_PREFIX = "/agents/"
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
"""The v0.3 name of the card's path (served as an alias)."""
CARD_PATHS = frozenset({CARD_PATH, LEGACY_CARD_PATH})
METRICS_PATH = "/metrics"
OPS_PATHS = frozenset({"/healthz", "/readyz", METRICS_PATH})
PUBLIC_PATHS = CARD_PATHS | OPS_PATHS
"""What needs no credential at the root and under every role's prefix (besides the console's page and
assets: `is_public`)."""
CONSOLE_PATH = "/console"
CONSOLE_API = f"{CONSOLE_PATH}/api/"
"""The console's reads: authenticated like the A2A endpoints, unlike its page and assets."""
JSONRPC_PATHS = frozenset({"/a2a", "/a2a/jsonrpc"})
MCP_PATH = "/mcp"
"""MCP for hosts (`bindings/mcp.py`): authenticated like the A2A endpoints, at the root only."""
WORKER_PATHS = "/workers/"
"""Remote workers' endpoints: a worker credential only, and it nowhere else."""
CHECKPOINT_PATH = re.compile(r"^/workers/v1/tasks/[^/]+/checkpoint$")
"""A worker's run's checkpoint (`endpoints/worker_checkpoints.py`): its upload may pass MAX_BODY_BYTES."""


def route_path(path: str) -> str:
    """`path` without a `/agents/{role}` prefix (`/agents/r/a2a/jsonrpc` → `/a2a/jsonrpc`)."""
    if path.startswith(ROLE_PREFIX):
        _, sep, tail = path[len(ROLE_PREFIX) :].partition("/")
        if sep:
            return "/" + tail
    return path


def is_public(path: str) -> bool:
    """Whether `path` needs no credential: `PUBLIC_PATHS` (the card, health, metrics) under any role's prefix,
    and the console's page and assets at the root (the page asks for a credential; its API needs one)."""
    if route_path(path) in PUBLIC_PATHS:
        return True
    return path == CONSOLE_PATH or (path.startswith(f"{CONSOLE_PATH}/") and not path.startswith(CONSOLE_API))
