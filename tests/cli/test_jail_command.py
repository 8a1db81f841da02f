"""Start-up refuses a command the jail cannot run (`jail.check_command`), with one line naming what is hidden
and the setting that shows it; a command it lets through does run in the jail.

The fakes are real files in a tmp folder (outside /usr, so the jail hides it): a pyenv-like shim that
`exec`s its tool's real program, a symlink to it, a script whose `#!/usr/bin/env` interpreter is such a
shim. The last test starts `a2a-server serve` with this machine's own `python3` when that is a pyenv shim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from app.agents.cli.cursor import CursorAgent
from app.agents.cli.ndjson import NdjsonAgent
from app.agents.errors import SettingError
from app.agents.events import AgentEventKind
from app.agents.options import AgentOptions
from app.agents.sdk import Request
from app.protocol.model import Message, Part, Role
from tests.support.server import BIN

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
DONE = '{"kind": "done", "summary": "the real program ran"}'


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def tool(tmp_path: Path) -> Path:
    """`<tmp>/.tool`: `shims/agent-cli` execs `libexec/agent-cli` (as pyenv's shims exec libexec/pyenv),
    which reads the prompt line and prints a `done` event; `bin/agent-cli` is a symlink to the shim."""
    root = tmp_path / ".tool"
    real = _executable(root / "libexec" / "agent-cli", f"#!/bin/sh\nread line\necho '{DONE}'\n")
    _executable(
        root / "shims" / "agent-cli",
        f'#!/usr/bin/env bash\nset -e\nprogram="${{0##*/}}"\nexec "{real}" "$@"\n',
    )
    (root / "bin").mkdir()
    (root / "bin" / "agent-cli").symlink_to(root / "shims" / "agent-cli")
    return root


def _options(tmp_path: Path, **values: object) -> AgentOptions:
    env = {"PATH": f"{tmp_path / '.tool' / 'bin'}:{SYSTEM_PATH}"}
    return AgentOptions(workspace_root=str(tmp_path / "ws"), env=env, **values)  # type: ignore[arg-type]


def test_a_shim_into_a_hidden_folder_stops_start_up(tmp_path: Path, tool: Path) -> None:
    with pytest.raises(SettingError) as refused:
        NdjsonAgent(_options(tmp_path, command="agent-cli --json"))
    assert refused.value.name == "AGENT_COMMAND"
    assert str(refused.value) == (
        f"agent-cli cannot run in the jail: {tool}/shims/agent-cli runs {tool}/libexec/agent-cli, "
        f"which the jail hides; show {tool}/libexec with AGENT_SANDBOX_READ"
    )


def test_the_same_shim_shown_with_sandbox_read_passes_and_runs_in_the_jail(
    tmp_path: Path, tool: Path
) -> None:
    agent = NdjsonAgent(_options(tmp_path, command="agent-cli --json", sandbox_read=(str(tool),)))

    async def run() -> list[str]:
        await agent.setup()
        try:
            message = Message(message_id=uuid.uuid4().hex, role=Role.USER, parts=[Part(text="hi")])
            run = agent.start(Request(message, "ctx", "alice", task_id="t-1"))
            return [f"{ev.kind.value}:{ev.summary or ev.text}" async for ev in run.events()]
        finally:
            await agent.aclose()

    assert asyncio.run(run()) == [f"{AgentEventKind.DONE.value}:the real program ran"]


def test_a_cli_binary_that_is_a_shim_names_its_bin_setting_or_the_roles_bin(
    tmp_path: Path, tool: Path
) -> None:
    shim = str(tool / "bin" / "agent-cli")
    with pytest.raises(SettingError) as refused:
        CursorAgent(_options(tmp_path, cursor_bin=shim))
    assert refused.value.name == "CURSOR_BIN"
    assert f"runs {tool}/libexec/agent-cli, which the jail hides" in str(refused.value)
    role = dataclasses.replace(_options(tmp_path), role="reviewer", bin=shim)
    with pytest.raises(SettingError) as refused:
        CursorAgent(role)
    assert refused.value.name == "AGENTS"
    assert str(refused.value).startswith("role 'reviewer', field bin: ")
    assert str(refused.value).endswith(
        "show " + str(tool / "libexec") + " with the role 'reviewer''s `sandbox_read` in AGENTS "
        "(or AGENT_SANDBOX_READ for every role)"
    )
    CursorAgent(dataclasses.replace(role, sandbox_read=(str(tool),)))


def test_an_interpreter_found_only_outside_the_jail_stops_start_up(tmp_path: Path, tool: Path) -> None:
    """`#!/usr/bin/env agent-cli`: the jail's `env` finds no agent-cli it can see on PATH."""
    script = _executable(tmp_path / "scripts" / "my-agent", "#!/usr/bin/env agent-cli\n")
    with pytest.raises(SettingError) as refused:
        NdjsonAgent(_options(tmp_path, command=str(script), sandbox_read=(str(script),)))
    assert f"{script} runs {tool}/bin/agent-cli, which the jail hides" in str(refused.value)


def test_a_hidden_script_argument_stops_start_up(tmp_path: Path) -> None:
    script = _executable(tmp_path / "agent.sh", f"read line\necho '{DONE}'\n")
    with pytest.raises(SettingError) as refused:
        NdjsonAgent(_options(tmp_path, command=f"sh {script}"))
    assert refused.value.name == "AGENT_COMMAND"
    assert str(refused.value) == (
        f"{script} (in AGENT_COMMAND) is hidden in the jail: show it with AGENT_SANDBOX_READ"
    )
    NdjsonAgent(_options(tmp_path, command=f"sh {script}", sandbox_read=(str(script),)))


def test_a_relative_script_is_looked_for_where_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sh agent.sh` started beside agent.sh: each run starts in its task's workspace, without it."""
    _executable(tmp_path / "agent.sh", f"read line\necho '{DONE}'\n")
    monkeypatch.chdir(tmp_path)
    for sandbox, network in (("bwrap", "egress"), ("none", "host")):
        with pytest.raises(SettingError, match=r"^agent.sh \(in AGENT_COMMAND\) is a file here, but the"):
            NdjsonAgent(_options(tmp_path, command="sh agent.sh", sandbox=sandbox, network=network))
    repo = tmp_path / "repo"
    _executable(repo / "agent.sh", "")
    NdjsonAgent(_options(tmp_path, command="sh agent.sh", repo_path=str(repo)))


def test_a_program_in_the_system_passes(tmp_path: Path) -> None:
    NdjsonAgent(_options(tmp_path, command="sh -c true"))
    NdjsonAgent(_options(tmp_path, command="no-such-program --x"))  # left to each run's error


def _pyenv_python() -> str | None:
    found = shutil.which("python3")
    if found is None:
        return None
    with open(found, "rb") as f:
        head = f.read(4096)
    return found if head.startswith(b"#!") and b"libexec/pyenv" in head else None


@pytest.mark.skipif(_pyenv_python() is None, reason="python3 here is not a pyenv shim")
@pytest.mark.parametrize("as_role", [False, True])
def test_a_pyenv_python3_stops_the_server_with_one_line(tmp_path: Path, as_role: bool) -> None:
    """The issue's case: AGENT_COMMAND="python3 agent.py" with a pyenv python3 failed every task with status
    127; now `a2a-server serve` says at once which path the jail hides and which setting shows it (for a
    role of AGENTS: the role, its field, and its `sandbox_read`)."""
    agent = tmp_path / "agent.py"
    agent.write_text("print('hi')\n")
    command = shlex.join(["python3", str(agent)])
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/a.db",
        "AUTH_MODE": "off",
        "PORT": "1",
    }
    if as_role:
        entry = {"adapter": "ndjson", "command": command, "sandbox_read": [str(agent)]}
        env["AGENTS"] = json.dumps({"helper": entry})
        start = (
            "error: invalid setting AGENTS: role 'helper', field command: python3 cannot run in the jail: "
        )
        shows = " with the role 'helper''s `sandbox_read` in AGENTS (or AGENT_SANDBOX_READ for every role)"
    else:
        env |= {"AGENT_ADAPTER": "ndjson", "AGENT_COMMAND": command, "AGENT_SANDBOX_READ": str(agent)}
        start = "error: invalid setting AGENT_COMMAND: python3 cannot run in the jail: "
        shows = " with AGENT_SANDBOX_READ"
    done = subprocess.run(
        [str(BIN / "a2a-server"), "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(start), lines[0]
    assert "libexec/pyenv, which the jail hides; show " in lines[0] and shows in lines[0], lines[0]
