"""The app for `bench.send --servers granian`: ours, built as `a2a-server serve` builds it, for granian (a
Rust HTTP server for ASGI apps) to import, so the two HTTP servers under the same app are measured side by
side (issue 39). Not a way to serve: `a2a-server serve` runs uvicorn."""

from __future__ import annotations

from typing import Any


def app() -> Any:
    """The app, its logs set up as `serve` sets them (granian's factory)."""
    from app.cli.serve import checked_app, load_settings
    from app.telemetry import logs

    settings = load_settings()
    logs.setup(settings.log_level, settings.log_format, settings.replica_id)
    return checked_app(settings)
