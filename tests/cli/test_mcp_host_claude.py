"""The real Claude Code CLI as an MCP host of `/mcp`, configured as docs/mcp.md says: `claude mcp add
--transport http ... --header` and the JSON form (`claude mcp add-json`), each with an API key; `claude mcp
list` connects with the right key and fails with a wrong one (the server answers it 401)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_server
from tests.support.auth import KEYS, api_keys_env
from tests.support.clis import CLI_BIN, install_clis
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
async def keyed(tmp_path_factory: Any) -> Any:
    install_clis()
    srv = await make_server("sqlite", tmp_path_factory.mktemp("mcp-host"), **api_keys_env())
    yield srv
    srv.stop()


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[Any]:
    """`claude <args>` with a home of its own (its configuration lands there), run in `tmp_path`."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(CLI_BIN / "claude"), *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"claude {args[:2]}: {done.stdout}\n{done.stderr}"
        return done

    yield run


def test_claude_code_reaches_mcp_with_the_documented_configuration(keyed: ServerProcess, claude: Any):
    url = f"{keyed.base_url}/mcp"
    claude("mcp", "add", "--transport", "http", "agents", url, "--header", f"X-API-Key: {KEYS['alice']}")
    config = {"type": "http", "url": url, "headers": {"X-API-Key": KEYS["bob"]}}
    claude("mcp", "add-json", "agents-json", json.dumps(config))
    claude("mcp", "add", "--transport", "http", "wrong-key", url, "--header", "X-API-Key: not-a-key")
    listed = {
        line.split(":", 1)[0]: line for line in claude("mcp", "list").stdout.splitlines() if url in line
    }
    assert set(listed) == {"agents", "agents-json", "wrong-key"}, listed
    assert "Connected" in listed["agents"] and "Connected" in listed["agents-json"], listed
    assert "Failed" in listed["wrong-key"], listed
