"""Fixtures for the console's browser tests: Debian's Chromium driven by Playwright, and a server with two
roles (the scripted agent, and one whose output tries to run script), API keys for alice, bob and carol
(the console admin)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.conftest import BACKENDS, make_server
from tests.support.auth import api_keys_env
from tests.support.browser import CHROMIUM, Browser, launch
from tests.support.server import ServerProcess

EXPECT_MS = 60_000
"""What an `expect` without a timeout of its own waits (Playwright's default is 5 s): a wait on what the page
shows, so a busy machine's slow page costs time, not a failure."""
expect.set_options(timeout=EXPECT_MS)

AGENTS = {
    "default": {"adapter": "scripted", "model": "big-model", "models": ["small-model"]},
    "hostile": {"adapter": "tests.support.agents.hostile:HostileAgent"},
}


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    async with launch() as b:
        yield b


@pytest.fixture(scope="module", params=BACKENDS)
async def console_server(
    request: pytest.FixtureRequest, tmp_path_factory: Any
) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"console-{request.param}"),
        **api_keys_env(AGENTS=json.dumps(AGENTS), CONSOLE_ADMINS="carol"),
    )
    yield srv
    srv.stop()
