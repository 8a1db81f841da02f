"""Command line: `a2a-server serve` and `a2a-server migrate`. A bad setting is one clear line."""

from __future__ import annotations

import argparse
import re
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError


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

    from app.agents.loader import AdapterError, load_agent
    from app.main import create_app

    settings = _settings()
    try:
        agent = load_agent(settings.agent_adapter, settings.agent_options)
    except AdapterError as exc:
        name = "AGENT_OPTIONS" if exc.options else "AGENT_ADAPTER"
        sys.exit(f"error: invalid setting {name}: {exc}")
    app = create_app(settings, agent)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
        proxy_headers=False,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="a2a-server", description=__doc__)
    parser.add_argument("command", choices=["serve", "migrate"])
    args = parser.parse_args(argv)
    {"serve": serve, "migrate": migrate}[args.command]()


if __name__ == "__main__":
    main()
