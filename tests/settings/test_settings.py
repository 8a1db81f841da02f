"""Settings: defaults, and a bad setting fails at start-up with one clear line, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from app.agents.options import AgentOptions
from app.cli.serve import checked_app, load_settings
from app.settings import Settings
from tests.support.server import BIN, ROOT, free_port


def test_defaults(monkeypatch):
    for name in ("HOST", "PORT", "PUBLIC_URL", "DATABASE_URL", "REDIS_URL", "AGENT_ADAPTER", "GRPC_PORT"):
        monkeypatch.delenv(name, raising=False)
    s = Settings(_env_file=None)
    assert (s.host, s.port) == ("127.0.0.1", 41242)
    assert s.public_url == "http://localhost:41242"
    assert (s.grpc_host, s.grpc_port, s.grpc_public_address) == ("127.0.0.1", 50051, "localhost:50051")
    assert s.database_url == "sqlite+aiosqlite:///./data/a2a.db"
    assert s.redis_url is None and s.agent_adapter == "echo"


def test_grpc_address_follows_public_url_unless_set():
    s = Settings(_env_file=None, public_url="https://[::1]:8443/a2a", grpc_port=9443, host="0.0.0.0")
    assert (s.grpc_host, s.grpc_public_address) == ("0.0.0.0", "[::1]:9443")
    s = Settings(_env_file=None, grpc_public_address="grpc.example.com:443")
    assert s.grpc_public_address == "grpc.example.com:443"


def test_plain_postgres_url_gets_the_async_driver():
    s = Settings(_env_file=None, database_url="postgresql://u@h/db")
    assert s.database_url == "postgresql+asyncpg://u@h/db"


BAD_SETTINGS = [
    ({"PORT": "eighty"}, "PORT"),
    ({"PORT": "70000"}, "PORT"),
    ({"GRPC_PORT": "-1"}, "GRPC_PORT"),
    ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL"),
    ({"PUBLIC_URL": "ftp://x"}, "PUBLIC_URL"),
    ({"AGENT_ADAPTER": "nosuch"}, "AGENT_ADAPTER"),
    ({"AGENT_ADAPTER": "nosuchmodule:Agent"}, "AGENT_ADAPTER"),
    ({"AGENT_ADAPTER": "json:dumps"}, "AGENT_ADAPTER"),
    ({"AGENT_ADAPTER": "tests.support.agents:nothing"}, "AGENT_ADAPTER"),
    ({"AGENT_ADAPTER": "tests.support.rpc:call"}, "AGENT_ADAPTER"),
    ({"AGENT_OPTIONS": "{not json"}, "AGENT_OPTIONS"),
    ({"AGENT_OPTIONS": '{"colour": "red"}'}, "AGENT_OPTIONS"),
    (
        {
            "AGENT_ADAPTER": "tests.support.agents.capabilities:CapabilitiesAgent",
            "AGENT_OPTIONS": '{"x": 1}',
        },
        "AGENT_OPTIONS",
    ),
    ({"AGENT_TIMEOUT_S": "-1"}, "AGENT_TIMEOUT_S"),
    ({"REDIS_URL": "http://x"}, "REDIS_URL"),
    ({"AGENT_SANDBOX": "docker"}, "AGENT_SANDBOX"),
    ({"AGENT_SANDBOX": "none", "AGENT_NETWORK": "egress"}, "AGENT_NETWORK"),
    ({"AGENT_EGRESS_ALLOW": "api.example.com,a*b.example.com"}, "AGENT_EGRESS_ALLOW"),
    ({"AGENT_EGRESS_ALLOW": "api.example.com:99999"}, "AGENT_EGRESS_ALLOW"),
    ({"AGENT_ENV": '["not", "an object"]'}, "AGENT_ENV"),
    ({"CARD_EXTENSIONS": '{"uri": "https://x.example/e"}'}, "CARD_EXTENSIONS"),
    ({"CARD_EXTENSIONS": '[{"uri": "not a uri"}]'}, "CARD_EXTENSIONS"),
    ({"CARD_EXTENSIONS": '[{"uri": "https://x.example/e", "required": "yes"}]'}, "CARD_EXTENSIONS"),
    ({"CARD_EXTENSIONS": '[{"uri": "https://x.example/e", "colour": 1}]'}, "CARD_EXTENSIONS"),
    (
        {"CARD_EXTENSIONS": '[{"uri": "https://x.example/e"}, {"uri": "https://x.example/e"}]'},
        "CARD_EXTENSIONS",
    ),
    (
        {"CARD_SIGNING_KEY_FILE": "/nonexistent/key.pem", "CARD_SIGNING_KID": "k", "AUTH_MODE": "off"},
        "CARD_SIGNING_KEY_FILE",
    ),
    ({"CARD_SIGNING_KID": "k", "AUTH_MODE": "off"}, "CARD_SIGNING_KID"),
    ({"CARD_SIGNING_JKU": "ftp://keys"}, "CARD_SIGNING_JKU"),
    ({"REPO_ALLOW": "relative/dir"}, "REPO_ALLOW"),
    ({"AGENT_WORKSPACE_ROOT": "/tmp/a2a-ws", "REPO_CACHE_ROOT": "/tmp/a2a-ws/repos"}, "REPO_CACHE_ROOT"),
]
"""A bad setting of each kind and the name its one line must give: refused by the settings themselves, by
the loading of the agent and its options, or by the assembly of the app."""


@pytest.mark.parametrize(("env", "name"), BAD_SETTINGS)
def test_bad_setting_is_one_clear_line(env, name, tmp_path, monkeypatch):
    """What `serve` exits with, in this process: `load_settings` and `checked_app`, the two steps before
    the server listens (the process itself: the test below)."""
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/x.db")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exited:
        checked_app(load_settings())
    err = str(exited.value.code)
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: invalid setting {name}:"), err


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "name"),
    [BAD_SETTINGS[0], BAD_SETTINGS[5], BAD_SETTINGS[-4]],
    ids=["settings", "adapter", "assembly"],
)
def test_a_bad_setting_ends_the_process_with_one_line(env, name, tmp_path):
    proc = subprocess.run(
        [str(BIN / "a2a-server"), "serve"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: invalid setting {name}:")


def test_plugin_agent_by_module_attr():
    from app.agents.echo import EchoAgent
    from app.agents.loader import load_agent

    options = AgentOptions.from_settings(Settings(_env_file=None))
    assert isinstance(load_agent("app.agents.echo:EchoAgent", agent_options=options), EchoAgent)
    scripted = load_agent("app.agents.scripted:ScriptedAgent", agent_options=options)
    assert isinstance(load_agent("scripted", agent_options=options), type(scripted))


def test_plugin_agent_gets_its_options():
    from app.agents.loader import load_agent
    from tests.support.agents.capabilities import CapabilitiesAgent

    spec = "tests.support.agents.capabilities:CapabilitiesAgent"
    agent = load_agent(spec, {"greeting": "hey"}, agent_options=AgentOptions())
    assert isinstance(agent, CapabilitiesAgent) and agent.greeting == "hey"


@pytest.mark.parametrize("spec", ["ndjson", "app.agents.cli.ndjson:NdjsonAgent"])
def test_cli_agent_gets_the_options_it_is_given(spec: str):
    """A CLI adapter runs with the AgentOptions it is given (the app's, or a role's), never the settings."""
    from app.agents.cli.ndjson import NdjsonAgent
    from app.agents.loader import load_agent

    options = AgentOptions.from_settings(Settings(_env_file=None, agent_command="my-cli --json"))
    agent = load_agent(spec, agent_options=options)
    assert isinstance(agent, NdjsonAgent) and agent.options is options


@pytest.mark.e2e
def test_grpc_port_in_use_is_one_clear_line(tmp_path):
    """Another process holds GRPC_PORT: start-up stops with one line (gRPC would share the port otherwise)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [str(BIN / "a2a-server"), "serve"],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db",
                "AUTH_MODE": "off",
                "HOST": "127.0.0.1",
                "PORT": str(free_port()),
                "GRPC_PORT": str(port),
            },
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"error: invalid setting GRPC_PORT: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def test_the_settings_class_follows_the_sections_of_docs_settings_md() -> None:
    """`Settings` lists every setting under the header of the docs/settings.md section that documents it, the
    sections in the docs' order, so the two are read side by side."""
    import re

    documented: dict[str, str] = {}
    docs_order: list[str] = []
    section = ""
    for line in (ROOT / "docs" / "settings.md").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            docs_order.append(section)
        elif line.startswith("| `"):
            for name in re.findall(r"`([A-Z0-9_]+)`", line.split("|")[1]):
                documented[name.lower()] = section
    declared: dict[str, str] = {}
    code_order: list[str] = []
    section = ""
    for line in (ROOT / "app" / "settings.py").read_text().splitlines():
        if header := re.fullmatch(r"    # ---- (.+) ----", line):
            section = header[1]
            code_order.append(section)
        elif field := re.match(r"    ([a-z][a-z0-9_]*): ", line):
            declared[field[1]] = section
    assert code_order[: len(docs_order)] == docs_order
    assert set(declared) == set(Settings.model_fields) == set(documented)
    assert {n: s for n, s in declared.items() if documented[n] != s} == {}
