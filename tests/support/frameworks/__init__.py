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

import httpx

from tests.support import rpc
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
    """Run `<driver>.py` of this folder in the venv; its JSON lines. A driver that fails, does not end in
    `timeout_s`, or prints anything but JSON lines on stdout, fails the test with its output."""
    try:
        done = subprocess.run(
            [str(python(venv)), str(HERE / f"{driver}.py"), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=HERE,
        )
    except subprocess.TimeoutExpired as exc:
        out, err = (_text(x) for x in (exc.stdout, exc.stderr))
        raise AssertionError(
            f"{driver} {' '.join(args)} did not end within {timeout_s:g}s:\n{out}\n{err[-4000:]}"
        ) from None
    out = done.stdout.strip().splitlines()
    shown = f"{driver} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    try:
        return [json.loads(line) for line in out if line.strip()]
    except json.JSONDecodeError:
        raise AssertionError(f"{driver} printed something that is not JSON:\n{done.stdout}") from None


def _text(output: str | bytes | None) -> str:
    """What a timed-out run printed (bytes, whatever `text=True` asked for)."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


# ---- what the tests read of a driver's turns ------------------------------------------------------------

Runs = dict[tuple[str, str], dict[str, Any]]
"""A driver's output by (mode, scenario)."""


def scenario(runs: Runs, mode: str, name: str, framework: str) -> dict[str, Any]:
    """A scenario's result, which must have run through."""
    found = runs.get((mode, name))
    assert found is not None, f"the driver printed nothing for {mode} {name}: {sorted(runs)}"
    assert "error" not in found, (
        f"{framework} failed in {mode} {name}: {found['error']}\n{found.get('trace', '')}"
    )
    return found


def turns(runs: Runs, mode: str, name: str, framework: str) -> list[dict[str, Any]]:
    """A scenario's turns, each of which must have ended without an error."""
    out = scenario(runs, mode, name, framework)["turns"]
    for t in out:
        assert "error" not in t, f"{framework} failed in {mode} {name}, turn {t['sent']!r}: {t['error']}\n{t}"
    return out


def check_card(card: dict[str, Any], base_url: str, name: str) -> None:
    """The driver's `card` scenario: fetched from the loopback origin it was given, and advertising it."""
    assert card["fetched"] == [f"{base_url}/.well-known/agent-card.json"], card
    assert card["card_name"] == name, card
    assert card["agent_name"] == name, f"A2AAgent did not take its name from the card: {card}"
    assert card["card_url"] == f"{base_url}/a2a/jsonrpc", (
        f"the card does not advertise the origin it was fetched from: {card}"
    )
    assert card["preferred_transport"] == "JSONRPC", card
    assert card["streaming"] is True, card


def only_task(turn: dict[str, Any]) -> str:
    assert len(turn["task_ids"]) == 1, f"one task expected for {turn['sent']!r}: {turn['task_ids']}"
    return turn["task_ids"][0]


def only_context(turn: dict[str, Any]) -> str:
    assert len(turn["context_ids"]) == 1, f"one context expected for {turn['sent']!r}: {turn['context_ids']}"
    return turn["context_ids"][0]


def only_send(turn: dict[str, Any]) -> dict[str, Any]:
    assert len(turn["wire"]) == 1, f"one send expected for {turn['sent']!r}: {turn['wire']}"
    return turn["wire"][0]


def texts(parts: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in parts)


async def task_on_server(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """The task as the server has it (`tasks/get`): what the framework's turns left there."""
    return await rpc.result(http, "tasks/get", {"id": task_id})
