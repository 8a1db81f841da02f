"""`a2a-server serve` and `migrate`, and `process_app`, the app of each of `WORKERS` uvicorn processes
(uvicorn calls "workers" what this project calls processes: a "worker" is a remote agent worker,
`worker.py`). Also `load_settings`, how every command reads its settings: a bad one is one clear line.

It imports pydantic and the telemetry at the top; the app, uvicorn and alembic inside the commands, so the
command line starts without them.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.telemetry import logs, traces

if TYPE_CHECKING:
    from fastapi import FastAPI

    from app.settings import Settings


def load_settings() -> Settings:
    """The settings from the environment; a bad one exits with one line naming it."""
    from app.settings import Settings

    try:
        return Settings()
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]).upper() if err["loc"] else "settings"
        sys.exit(f"error: invalid setting {name}: {err['msg']}")
    except SettingsError as exc:
        # A complex setting (a JSON object) that does not parse: name it from pydantic's message.
        field = re.search(r'field "(\w+)"', str(exc))
        name = field.group(1).upper() if field else "settings"
        sys.exit(f"error: invalid setting {name}: not valid JSON")


def migrate() -> None:
    from app.store import migrations

    migrations.upgrade(load_settings().database_url)


def checked_app(settings: Settings) -> FastAPI:
    """The app `serve` runs for `settings`; a setting its assembly refuses (an adapter, its options, a
    role, a key file, a taken gRPC port) exits with one line naming it."""
    from app.agents.loader import AdapterError
    from app.api.bindings.grpc_server import check_port
    from app.main import create_app
    from app.settings import SettingError

    try:
        app = create_app(settings)
        if settings.grpc_port:
            check_port(settings.grpc_host, settings.grpc_port)
    except AdapterError as exc:
        name = "AGENT_OPTIONS" if exc.options else "AGENT_ADAPTER"
        sys.exit(f"error: invalid setting {name}: {exc}")
    except SettingError as exc:
        sys.exit(f"error: invalid setting {exc.name}: {exc}")
    return app


def serve() -> None:
    import uvicorn

    from app.store import migrations

    settings = load_settings()
    logs.setup(settings.log_level, settings.log_format, settings.replica_id)
    traced = traces.setup(traces.endpoint_from(settings), settings.replica_id, settings.otel_service_name)
    app = checked_app(settings)
    # After the settings' own checks: a bad setting is the line to fix first, migrated or not.
    if why := migrations.unmigrated(settings.database_url):
        sys.exit(f"error: {why}")
    # The start-up line is logged whatever LOG_LEVEL says (its logger is at INFO).
    start = logging.getLogger("app.start")
    start.setLevel(logging.INFO)
    start.info(
        "a2a-server on %s:%s%s: %s%s",
        settings.host,
        settings.port,
        f" (gRPC {settings.grpc_host}:{settings.grpc_port})"
        if settings.grpc_port
        else " (no gRPC: GRPC_PORT=0)",
        app.state.authenticator.describe(),
        "; tracing on (OTLP/HTTP)" if traced else "",
    )
    if settings.workers > 1:
        start.info(
            "%d worker processes, each its own replica %s/<pid>", settings.workers, settings.replica_id
        )
    try:
        uvicorn.run(
            # Several processes: each builds its own app (`process_app`); this one only supervises.
            "app.cli.serve:process_app" if settings.workers > 1 else app,
            factory=settings.workers > 1,
            workers=settings.workers,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            # Logging is configured above (app/telemetry/logs.py): uvicorn's records, the access line
            # included, go through the same handler, format and redaction as ours.
            log_config=None,
            timeout_graceful_shutdown=5,
            proxy_headers=False,
        )
    finally:
        traces.shutdown()


def process_app() -> Any:
    """One of `WORKERS` server processes (uvicorn calls this in each): a replica of its own, named
    `<REPLICA_ID>/<pid>`, sharing the database and the Redis bus with its siblings as replicas do. A process
    uvicorn restarts is a new replica: the reaper ends or re-queues what the old one held."""
    import atexit
    import os

    from app.main import create_app

    settings = load_settings()
    settings.replica_id = f"{settings.replica_id}/{os.getpid()}"
    logs.setup(settings.log_level, settings.log_format, settings.replica_id)
    if traces.setup(traces.endpoint_from(settings), settings.replica_id, settings.otel_service_name):
        atexit.register(traces.shutdown)
    return create_app(settings)
