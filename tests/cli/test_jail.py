"""The jail of coding agents (docs/agents.md "Security of coding agents"), tried by a hostile agent.

A real server (SQLite, API keys for alice and bob) runs the `ndjson` adapter with
tests/support/fakes/hostile_agent.py in the default jail (bubblewrap, egress). Alice's agent tries to read its
environment, Bob's workspace, the data folder and the project, to write outside its workspace, to connect to
PostgreSQL, Redis, the server and the metadata address, directly and through its proxy, and to fetch from the
one allowlisted local server. The report it prints is the task's answer.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.cli.cursor import CursorAgent
from app.agents.cli.ndjson import NdjsonAgent
from app.agents.cli.run import CliRun
from app.agents.events import AgentEventKind
from app.agents.jail.egress import Policy, Refused, parse_allow
from app.agents.jail.sandbox import agent_env, principal_key
from app.agents.options import AgentOptions
from app.agents.sdk import Request
from app.protocol.model import Message, Part, Role
from app.settings import SettingError, Settings
from tests.conftest import make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.clis import FAKES, response_text, send_message, wait_until_stopped
from tests.support.server import BIN, ROOT, ServerProcess

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
SECRET = "server-secret-" + uuid.uuid4().hex
CURSOR_SESSION = "0b6c1d9e-1111-4222-8333-444455556666"
"""The session id tests/support/fakes/cursor_agent.py announces."""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"allowed-ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def allowed() -> Iterator[str]:
    """A local HTTP server the jail's allowlist names: the stand-in for a model API."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class Jailed:
    def __init__(self, server: ServerProcess, tmp: Path) -> None:
        self.server, self.tmp = server, tmp

    def workspace(self, principal: str, context_id: str) -> Path:
        return self.tmp / "ws" / principal_key(principal) / context_id

    async def run(self, principal: str, plan: dict[str, Any], context_id: str) -> dict[str, Any]:
        """Alice's or Bob's task with the plan as its prompt; the agent's report."""
        async with httpx.AsyncClient(
            base_url=self.server.base_url, timeout=60, headers=key_of(principal)
        ) as c:
            task = await send_message(c, json.dumps(plan), contextId=context_id)
            task = await wait_until_stopped(c, task)
        assert task["status"]["state"] == "completed", task["status"]
        return json.loads(response_text(task))


@pytest.fixture(scope="module")
async def jailed(allowed: str, tmp_path_factory: Any) -> AsyncIterator[Jailed]:
    tmp = tmp_path_factory.mktemp("jail")
    server = await make_server(
        "sqlite",
        tmp,
        **api_keys_env(),
        AGENT_ADAPTER="ndjson",
        AGENT_COMMAND=shlex.join([PYTHON, str(FAKES / "hostile_agent.py")]),
        AGENT_SANDBOX_READ=str(FAKES / "hostile_agent.py"),
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        AGENT_EGRESS_ALLOW=allowed,
        AGENT_ENV=json.dumps({"MODEL_API_KEY": "model-key"}),
        AGENT_ENV_PASSTHROUGH="PASSED_ON",
        PASSED_ON="passed-on",
        SERVER_SECRET=SECRET,
        JWT_ISSUER="https://issuer.test",
    )
    yield Jailed(server, tmp)
    server.stop()


async def test_a_hostile_agent_reaches_nothing_but_its_workspace_and_the_allowlist(
    jailed: Jailed, allowed: str
) -> None:
    bob_ctx = f"ctx-{uuid.uuid4().hex[:8]}"
    await jailed.run("bob", {"write": ["bob-secret.txt"]}, bob_ctx)
    bob_ws = jailed.workspace("bob", bob_ctx)
    assert (bob_ws / "bob-secret.txt").exists()
    db = jailed.server.database_url.split(":///", 1)[1]
    pg = ("127.0.0.1", 54329)
    redis = ("127.0.0.1", 63790)
    server = ("127.0.0.1", jailed.server.port)
    metadata = ("169.254.169.254", 80)
    host, port = allowed.split(":")
    plan = {
        "read": [
            str(bob_ws),
            str(bob_ws / "bob-secret.txt"),
            str(jailed.tmp),
            db,
            str(ROOT),
            "/root",
            "/home",
        ],
        "write": [str(ROOT / "escape.txt"), str(bob_ws / "planted.txt"), "/usr/escape", "/etc/escape", "/x"],
        "connect": [pg, redis, server, metadata, (host, int(port))],
        "tunnel": [pg, redis, server, metadata, ("10.0.0.1", 443), ("example.com", 443), (host, int(port))],
        "fetch": [
            f"http://{allowed}/model",
            f"http://127.0.0.1:{jailed.server.port}/.well-known/agent-card.json",
        ],
    }
    report = await jailed.run("alice", plan, f"ctx-{uuid.uuid4().hex[:8]}")

    env = report.pop("env")
    assert env["MODEL_API_KEY"] == "model-key" and env["PASSED_ON"] == "passed-on"
    assert env["HOME"].startswith(str(jailed.tmp / "ws" / principal_key("alice")))
    for name in ("DATABASE_URL", "REDIS_URL", "API_KEYS", "AUTH_MODE", "SERVER_SECRET", "JWT_ISSUER"):
        assert name not in env
    assert not any(k.startswith("TEST_") for k in env)
    assert SECRET not in json.dumps(env) and "bob" not in json.dumps(env)
    assert len(report.pop("pids")) < 8, "its own pid namespace: only the jail's few processes"
    report.pop("pid")

    assert report.pop(f"fetch http://{allowed}/model") == "ok allowed-ok"
    assert report.pop(f"tunnel {allowed}") == "ok allowed-ok"
    # The data folder and the project are at most the empty folders leading to what is bound.
    assert report.pop(f"read {jailed.tmp}") in ("ok ['ws']", "ok []")
    assert report.pop(f"read {ROOT}") in ("ok ['tests']", "ok []")
    # A checkout under /tmp is shadowed by the jail's private /tmp: a write there lands in the jail only.
    escape = report.pop(f"write {ROOT / 'escape.txt'}")
    assert escape.startswith("refused: ") or (ROOT.is_relative_to("/tmp") and escape == "ok written")
    # Everything else was refused.
    assert all(outcome.startswith("refused: ") for outcome in report.values()), json.dumps(report, indent=1)
    assert "403" in report[f"tunnel 127.0.0.1:{pg[1]}"] and "403" in report["tunnel 169.254.169.254:80"]
    assert not (ROOT / "escape.txt").exists() and not (bob_ws / "planted.txt").exists()


async def test_two_principals_sending_one_context_id_share_no_folder(jailed: Jailed) -> None:
    """Over the API (contexts are per principal): Alice and Bob both send with one contextId; each agent runs
    in its own principal's workspace and HOME, and Bob's finds nothing of what Alice's wrote."""
    ctx = f"shared-{uuid.uuid4().hex[:8]}"
    alice = await jailed.run("alice", {"write": ["alice-notes.txt"]}, ctx)
    bob = await jailed.run("bob", {"read": ["alice-notes.txt", "."], "write": ["bob-notes.txt"]}, ctx)
    assert alice["write alice-notes.txt"] == "ok written"
    assert bob["read alice-notes.txt"].startswith("refused: FileNotFoundError"), bob
    assert bob["read ."] == "ok []"
    assert (jailed.workspace("alice", ctx) / "alice-notes.txt").exists()
    assert (jailed.workspace("bob", ctx) / "bob-notes.txt").exists()
    assert not (jailed.workspace("alice", ctx) / "bob-notes.txt").exists()
    assert alice["env"]["HOME"] != bob["env"]["HOME"]
    assert bob["env"]["HOME"].startswith(str(jailed.tmp / "ws" / principal_key("bob")))


async def test_two_principals_with_one_context_id_get_two_workspaces_and_sessions(tmp_path: Path) -> None:
    """Runs of the cursor adapter (its fake CLI writes its argv into its workspace), in the jail, driven
    in-process: contexts are one principal's today, but the CLI layer must keep them apart anyway."""
    options = AgentOptions(cursor_bin=str(FAKES / "cursor_agent.py"), workspace_root=str(tmp_path / "ws"))
    agent = CursorAgent(options)
    await agent.setup()

    async def turn(principal: str) -> tuple[Path, list[str]]:
        message = Message(message_id=uuid.uuid4().hex, role=Role.USER, parts=[Part(text="hi")])
        run = agent.start(Request(message, "shared", principal, task_id="t-" + uuid.uuid4().hex))
        kinds = [ev.kind async for ev in run.events()]
        assert kinds[-1] is AgentEventKind.DONE, kinds
        assert isinstance(run, CliRun)
        return run.workspace, json.loads((run.workspace / "argv.json").read_text())

    try:
        alice_ws, first = await turn("alice")
        bob_ws, bobs = await turn("bob")
        _, second = await turn("alice")
    finally:
        await agent.aclose()
    assert alice_ws != bob_ws and alice_ws.name == bob_ws.name == "shared"
    assert "--resume" not in first and "--resume" not in bobs, "bob must not resume alice's session"
    assert second[second.index("--resume") + 1] == CURSOR_SESSION


async def test_a_wildcard_entry_never_reaches_a_private_address() -> None:
    """`*.0.0.1` matches the name 127.0.0.1, but only an exact entry may lead to a loopback address."""
    policy = Policy(parse_allow("*.0.0.1:5432, 127.0.0.1:6379"))
    with pytest.raises(Refused, match="no public address"):
        await policy.resolve("127.0.0.1", 5432)
    assert await policy.resolve("127.0.0.1", 6379) == ["127.0.0.1"]
    with pytest.raises(Refused, match="not in AGENT_EGRESS_ALLOW"):
        await policy.resolve("127.0.0.1", 5433)


def test_the_environment_of_a_cli_is_the_allowlist(tmp_path: Path) -> None:
    """Also without the jail: the server's settings and secrets never reach a CLI."""
    server_env = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "DATABASE_URL": "postgresql://u:pw@db/a2a",
        "REDIS_URL": "redis://r",
        "API_KEYS": "{}",
        "JWT_JWKS_URL": "https://i/jwks",
        "AWS_SECRET_ACCESS_KEY": "x",
        "OPENAI_API_KEY": "sk-passed",
    }
    options = AgentOptions.from_settings(
        Settings(
            _env_file=None,
            agent_sandbox="none",
            agent_env={"ANTHROPIC_API_KEY": "sk-given"},
            agent_env_passthrough="OPENAI_API_KEY, NOT_SET",
        )
    )
    env = agent_env(options, tmp_path, {"IS_SANDBOX": "1"}, server_env)
    assert env == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
        "OPENAI_API_KEY": "sk-passed",
        "ANTHROPIC_API_KEY": "sk-given",
        "IS_SANDBOX": "1",
        "HOME": str(tmp_path),
        "TMPDIR": env["TMPDIR"],
    }


async def test_a_single_user_repo_is_bound_alone_into_the_jail(tmp_path: Path) -> None:
    """AGENT_REPO_PATH: the agent works in the repository, and sees no workspace of the per-principal tree."""
    repo, other = tmp_path / "repo", tmp_path / "ws" / principal_key("bob") / "ctx"
    repo.mkdir()
    other.mkdir(parents=True)
    (other / "bob.txt").write_text("bob's")
    options = AgentOptions(
        command=shlex.join([PYTHON, str(FAKES / "hostile_agent.py")]),
        sandbox_read=(str(FAKES / "hostile_agent.py"),),
        repo_path=str(repo),
        workspace_root=str(tmp_path / "ws"),
    )
    agent = NdjsonAgent(options)
    await agent.setup()
    plan = {"read": [str(other), str(tmp_path)], "write": ["in-repo.txt", str(tmp_path / "beside.txt")]}
    message = Message(message_id=uuid.uuid4().hex, role=Role.USER, parts=[Part(text=json.dumps(plan))])
    run = agent.start(Request(message, "ctx", "alice", task_id="t-1"))
    try:
        report = json.loads(
            "".join([ev.text async for ev in run.events() if ev.kind is AgentEventKind.THINKING])
        )
    finally:
        await agent.aclose()
    assert report["write in-repo.txt"] == "ok written" and (repo / "in-repo.txt").exists()
    assert report[f"read {other}"].startswith("refused: FileNotFoundError")
    assert report[f"read {tmp_path}"] in ("ok ['repo', 'ws']", "ok ['ws', 'repo']"), (
        "only what leads to binds"
    )
    assert not (tmp_path / "beside.txt").exists(), "at most in the jail's private /tmp"


def test_a_read_path_above_the_workspaces_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match="holds the workspaces of every principal"):
        NdjsonAgent(
            AgentOptions(
                command="true",
                workspace_root=str(tmp_path / "data" / "ws"),
                sandbox_read=("/usr/share", str(tmp_path)),
            )
        )


def test_a_read_path_showing_the_repositories_cache_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=r"holds the repositories' cache \(REPO_CACHE_ROOT\)"):
        NdjsonAgent(
            AgentOptions(
                command="true",
                workspace_root=str(tmp_path / "ws"),
                repo_cache_root=str(tmp_path / "data" / "repos"),
                sandbox_read=(str(tmp_path / "data"),),
            )
        )


def test_start_up_stops_when_bubblewrap_cannot_run(tmp_path: Path) -> None:
    """Fail closed: no bwrap on PATH and the jail on (the default) → one line, and no server."""
    env = {
        "PATH": str(tmp_path),
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/a.db",
        "AGENT_ADAPTER": "ndjson",
        "AGENT_COMMAND": "true",
        "AUTH_MODE": "off",
        "PORT": "1",
    }
    done = subprocess.run(
        [str(BIN / "a2a-server"), "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "error: invalid setting AGENT_SANDBOX: bubblewrap (bwrap) is not installed: install Debian's "
        "bubblewrap, or set AGENT_SANDBOX=none to run coding agents without a jail"
    ]
