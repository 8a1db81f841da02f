"""Agent frameworks (Google ADK, AWS Strands, BeeAI) as their users run them, against a real server.

Each framework runs in a venv of its own (`scripts/install-frameworks.sh`: one per `<set>.txt` here, every
package pinned by `<set>.lock`), because their a2a-sdk pins differ from the server's. A driver script of
this folder runs in that venv, drives the framework's remote-agent class (no model: the remote agent is
the agent that runs, or a workflow of two), and prints one JSON object per line: what the framework showed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.server import ROOT

HERE = Path(__file__).resolve().parent
VENVS = ROOT / ".cache" / "frameworks"
INSTALL = ROOT / "scripts" / "install-frameworks.sh"


def install() -> None:
    """Build the venvs (a no-op once built from the same files); fails the tests when pip cannot."""
    done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"installing the frameworks failed:\n{done.stdout}\n{done.stderr}"


def python(venv: str) -> Path:
    """The interpreter of a framework venv (`a2a03`, ...)."""
    return VENVS / venv / "bin" / "python"


def run_driver(venv: str, driver: str, *args: str, timeout_s: float = 180) -> list[dict[str, Any]]:
    """Run `<driver>.py` of this folder in the venv; its JSON lines. A driver that fails, or prints
    anything but JSON lines on stdout, fails the test with its output."""
    done = subprocess.run(
        [str(python(venv)), str(HERE / f"{driver}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=HERE,
    )
    out = done.stdout.strip().splitlines()
    shown = f"{driver} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    try:
        return [json.loads(line) for line in out if line.strip()]
    except json.JSONDecodeError:
        raise AssertionError(f"{driver} printed something that is not JSON:\n{done.stdout}") from None
