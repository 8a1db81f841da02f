"""What a server process pays for at start: the `mcp` SDK (most of a second to import on a busy machine) is
loaded only by a run that serves tools or the first call of `/mcp`, not by every start of every server (the
suite starts hundreds)."""

from __future__ import annotations

import subprocess
import sys

MODULES = "app.main, app.wiring, app.cli, app.agents.cli.claude, app.agents.cli.codex, app.agents.cli.gemini"


def test_a_server_starts_without_importing_the_mcp_sdk():
    loaded = "sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types'))"
    code = f"import sys, {MODULES}; print({loaded})"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout
