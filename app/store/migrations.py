"""The alembic migrations shipped with this code, found from the package (not the working folder), so that
`a2a-server migrate` and `/readyz`'s head check work from wherever the server is started."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory

import app

ROOT = Path(app.__file__).resolve().parent.parent
"""The checkout (or image folder) holding `alembic.ini` and `migrations/`."""


def config(database_url: str | None = None) -> Config:
    """Alembic's configuration for this code's migrations, on `database_url` when given (else env.py takes
    the settings')."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    if database_url is not None:
        cfg.set_main_option("sqlalchemy.url", database_url)
    return cfg


def upgrade(database_url: str) -> None:
    """Migrate the database to this code's head."""
    from alembic import command

    command.upgrade(config(database_url), "head")


@lru_cache
def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())
