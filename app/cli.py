"""Command line: `a2a-server serve`, `a2a-server migrate` and `a2a-server hash-key`.

A bad setting is one clear line.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.telemetry import logs, traces


def _settings():
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
    from alembic import command
    from alembic.config import Config

    settings = _settings()
    cfg = Config("alembic.ini")
    cfg.set_main_option("sqlalchemy.url", settings.database_url)
    command.upgrade(cfg, "head")


def serve() -> None:
    import uvicorn

    from app.agents.loader import AdapterError
    from app.api.grpc_server import check_port
    from app.main import create_app
    from app.settings import SettingError

    settings = _settings()
    logs.setup(settings.log_level, settings.log_format, settings.replica_id)
    traced = traces.setup(traces.endpoint_from(settings), settings.replica_id, settings.otel_service_name)
    try:
        app = create_app(settings)
        if settings.grpc_port:
            check_port(settings)
    except AdapterError as exc:
        name = "AGENT_OPTIONS" if exc.options else "AGENT_ADAPTER"
        sys.exit(f"error: invalid setting {name}: {exc}")
    except SettingError as exc:
        sys.exit(f"error: invalid setting {exc.name}: {exc}")
    # The start-up line is logged whatever LOG_LEVEL says (its logger is at INFO).
    start = logging.getLogger("app.start")
    start.setLevel(logging.INFO)
    start.info(
        "a2a-server on %s:%s%s: %s%s",
        settings.host,
        settings.port,
        f" (gRPC {settings.grpc_host}:{settings.grpc_port})" if settings.grpc_port else "",
        app.state.authenticator.describe(),
        "; tracing on (OTLP/HTTP)" if traced else "",
    )
    try:
        uvicorn.run(
            app,
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


def hash_key(key: str | None, generate: bool) -> None:
    """Print the API_KEYS entry for a key (read from stdin when not given), or for a new random key."""
    from app.api.auth import hash_key as digest
    from app.api.auth import new_key

    if generate:
        key = new_key()
        print(f"key (give it to the client, it is not stored): {key}")
    elif key is None:
        key = sys.stdin.readline().strip()
    if not key:
        sys.exit("error: no key given (an argument, a line on stdin, or --generate)")
    print(f"sha256: {digest(key)}")
    print(f"""API_KEYS entry: {{"{digest(key)}": "<principal>"}}""")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="a2a-server", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve the A2A endpoints")
    sub.add_parser("migrate", help="upgrade the database to the newest migration")
    hk = sub.add_parser("hash-key", help="print the sha256 that API_KEYS stores for an API key")
    hk.add_argument("key", nargs="?", help="the key (default: one line from stdin)")
    hk.add_argument("--generate", action="store_true", help="make a new random key and print both")
    wk = sub.add_parser("worker", help="run one role's agents here for a server elsewhere (a remote worker)")
    wk.add_argument(
        "--server", required=True, help="the server's base URL (its load balancer), e.g. https://a2a.example"
    )
    wk.add_argument("--role", required=True, help="the role whose tasks this worker runs")
    wk.add_argument("--instance", help="this worker's instance name (default: hostname-pid)")
    wk.add_argument("--slots", type=int, help="agent runs at once (default: the role's slots)")
    args = parser.parse_args(argv)
    if args.command == "hash-key":
        hash_key(args.key, args.generate)
    elif args.command == "worker":
        from app.worker import main as worker

        worker(args.server, args.role, args.instance, args.slots)
    else:
        {"serve": serve, "migrate": migrate}[args.command]()


if __name__ == "__main__":
    main()
