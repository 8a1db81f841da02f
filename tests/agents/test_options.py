"""AgentOptions: what a CLI adapter runs with, built from the settings or for a role, never the Settings."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from app.agents.errors import SettingError
from app.agents.options import AgentOptions, replica_tag
from app.agents.repos.policy import RepoPolicy
from app.agents.repos.source import RepoSource
from app.settings import SettingError as SettingsSettingError, Settings

AGENTS = Path(__file__).resolve().parents[2] / "app" / "agents"


def test_from_settings_takes_every_agent_setting() -> None:
    settings = Settings(
        _env_file=None,
        database_url="sqlite+aiosqlite:///./data/x.db",
        agent_workspace_root="/srv/ws",
        agent_repo_path="/srv/repo",
        agent_egress_allow="api.example.com, *.googleapis.com:443",
        agent_env={"MODEL_KEY": "k"},
        agent_env_passthrough="A, B",
        agent_sandbox_read="/opt/x, /opt/y",
        agent_home_seed="/srv/seed",
        agent_idle_timeout_s=12,
        agent_force=False,
        agent_model="m-1",
        agent_command="python3 agent.py",
        cancel_grace_s=1.5,
        claude_bin="/opt/claude",
        codex_bin="/opt/codex",
        gemini_bin="/opt/gemini",
        cursor_bin="/opt/cursor",
        replica_id="r-1",
    )
    o = AgentOptions.from_settings(settings)
    assert o == AgentOptions(
        workspace_root="/srv/ws",
        repo_path="/srv/repo",
        sandbox="bwrap",
        network="egress",
        egress_allow="api.example.com, *.googleapis.com:443",
        env={"MODEL_KEY": "k"},
        env_passthrough=("A", "B"),
        sandbox_read=("/opt/x", "/opt/y"),
        home_seed="/srv/seed",
        idle_timeout_s=12,
        force=False,
        model="m-1",
        command="python3 agent.py",
        bin=None,
        cancel_grace_s=1.5,
        claude_bin="/opt/claude",
        codex_bin="/opt/codex",
        gemini_bin="/opt/gemini",
        cursor_bin="/opt/cursor",
        owner=replica_tag("r-1", "sqlite+aiosqlite:///./data/x.db"),
        database_file="./data/x.db",
        role=None,
    )
    assert [a.host for a in o.allowed] == ["api.example.com", "*.googleapis.com"]


def test_from_settings_resolves_the_network_and_knows_no_database_file_on_postgres() -> None:
    jailed = AgentOptions.from_settings(Settings(_env_file=None, database_url="postgresql://u@h/db"))
    assert (jailed.sandbox, jailed.network, jailed.database_file) == ("bwrap", "egress", None)
    bare = AgentOptions.from_settings(Settings(_env_file=None, agent_sandbox="none"))
    assert (bare.sandbox, bare.network) == ("none", "host")
    host = AgentOptions.from_settings(Settings(_env_file=None, agent_network="host"))
    assert (host.sandbox, host.network) == ("bwrap", "host")


def test_a_replicas_cli_tag_names_its_id_and_its_database_and_nothing_of_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restarted replica reaps by: the same in each life of one replica (a rotated password, a
    relative SQLite path from its folder), never another deployment's replica of the same id."""
    pg = "postgresql+asyncpg://a2a:old@db.internal:5432/a2a"
    tag = replica_tag("a2a-1", pg)
    assert tag.startswith("replica:a2a-1@") and "db.internal" not in tag and "old" not in tag
    assert replica_tag("a2a-1", pg.replace(":old@", ":new@")) == tag, "a rotated password keeps the tag"
    assert replica_tag("a2a-1", pg.replace("/a2a", "/other")) != tag, "another deployment's database"
    assert replica_tag("a2a-2", pg) != tag
    monkeypatch.chdir(tmp_path)
    relative = replica_tag("a2a-1", "sqlite+aiosqlite:///./data/a2a.db")
    assert relative == replica_tag("a2a-1", f"sqlite+aiosqlite:///{tmp_path / 'data' / 'a2a.db'}")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert replica_tag("a2a-1", "sqlite+aiosqlite:///./data/a2a.db") != relative, "another folder's file"
    settings = Settings(_env_file=None, replica_id="a2a-1", database_url=pg)
    assert AgentOptions.from_settings(settings).owner == tag


def test_a_role_is_a_checked_copy_and_the_server_wide_options_stay() -> None:
    base = AgentOptions.from_settings(Settings(_env_file=None, agent_model="m-1", claude_bin="claude"))
    role = dataclasses.replace(base, role="reviewer", bin="/opt/claude-2", sandbox_read=["/opt/r"])
    assert role.sandbox_read == ("/opt/r",) and isinstance(role.sandbox_read, tuple)
    assert (role.bin, role.model, role.role) == ("/opt/claude-2", "m-1", "reviewer")
    assert (base.bin, base.sandbox_read, base.role) == (None, (), None)
    assert base.replace(model="m-2").model == "m-2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        role.model = "other"  # type: ignore[misc]


def test_a_bad_value_is_one_line_naming_the_setting_or_the_role() -> None:
    with pytest.raises(SettingError) as bad:
        AgentOptions(egress_allow="api.example.com,a*b.example.com")
    assert bad.value.name == "AGENT_EGRESS_ALLOW" and "wildcard" in str(bad.value)
    with pytest.raises(SettingError) as bad:
        dataclasses.replace(AgentOptions(role="reviewer"), egress_allow="x.example.com:99999")
    assert bad.value.name == "AGENTS"
    assert str(bad.value).startswith("role 'reviewer', field egress_allow: ") and "\n" not in str(bad.value)
    with pytest.raises(SettingError) as bad:
        AgentOptions(sandbox="none", network="egress")
    assert bad.value.name == "AGENT_NETWORK" and "egress needs the jail" in str(bad.value)
    with pytest.raises(SettingError) as bad:
        AgentOptions(role="triage", idle_timeout_s=0)
    assert bad.value.name == "AGENTS" and "field idle_timeout_s:" in str(bad.value)


def test_where_names_the_setting_or_the_roles_field() -> None:
    assert AgentOptions().where("sandbox_read") == "AGENT_SANDBOX_READ"
    assert AgentOptions().where("bin", "CLAUDE_BIN") == "CLAUDE_BIN"
    role = AgentOptions(role="reviewer")
    assert role.where("sandbox_read") == (
        "the role 'reviewer''s `sandbox_read` in AGENTS (or AGENT_SANDBOX_READ for every role)"
    )
    assert role.where("sandbox") == "AGENT_SANDBOX", "not a role's field: server-wide"


def test_a_bad_egress_entry_stops_start_up_through_the_options_not_the_settings() -> None:
    Settings(_env_file=None, agent_egress_allow="a*b.example.com")  # the settings do not parse it
    with pytest.raises(SettingError, match="wildcard"):
        AgentOptions.from_settings(Settings(_env_file=None, agent_egress_allow="a*b.example.com"))


def test_the_agents_never_import_the_settings() -> None:
    """The room rule of docs/ARCHITECTURE.md: `grep -rn app.settings app/agents` is empty, and of ours the
    agents (the CLI adapters and their jail included) import the domain model only (`protocol.model`,
    `protocol.events`, `protocol.usage`), never a codec, and the leaf every room may import that builds
    their options (`app.options`), and the SSRF guard their files by URL pass (`app.ssrf`)."""
    assert SettingsSettingError is SettingError, "app.settings re-exports the agents' SettingError"
    allowed = r"protocol\.(model|events|usage)\b|options\b|ssrf\b"
    found = [
        f"{p.relative_to(AGENTS)}:{n}"
        for p in sorted(AGENTS.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(rf"app\.settings|get_settings|^\s*(from|import) app\.(?!{allowed})", line)
    ]
    assert found == []


def test_a_roles_entry_goes_over_the_server_wide_options() -> None:
    """`roles.agent_options`: the role's fields replace the server-wide ones, its env adds to theirs."""
    from app import roles

    settings = Settings(
        _env_file=None,
        agents={
            "reviewer": {
                "adapter": "claude-code",
                "bin": "/opt/claude-2",
                "env": {"B": "2"},
                "egress_allow": ["api.anthropic.com"],
                "sandbox_read": ["/opt/r"],
                "idle_timeout_s": 60,
            },
            "triage": {"adapter": "ndjson", "command": "/usr/bin/true", "egress_allow": ["a*b.example.com"]},
        },
        agent_env={"A": "1"},
        agent_model="m-1",
    )
    loaded = roles.load(settings)
    base = AgentOptions.from_settings(settings)
    reviewer = roles.agent_options(base, loaded["reviewer"])
    assert reviewer == dataclasses.replace(
        base,
        role="reviewer",
        bin="/opt/claude-2",
        env={"A": "1", "B": "2"},
        egress_allow="api.anthropic.com",
        sandbox_read=("/opt/r",),
        idle_timeout_s=60,
    )
    assert reviewer.model == "m-1" and base.env == {"A": "1"}
    with pytest.raises(SettingError) as bad:
        roles.agent_options(base, loaded["triage"])
    assert bad.value.name == "AGENTS"
    assert str(bad.value).startswith("role 'triage', field egress_allow: ")


def test_a_roles_force_overrides_agent_force_and_one_without_keeps_it() -> None:
    from app import roles

    claude = {"adapter": "claude-code", "bin": "/opt/claude"}
    settings = Settings(
        _env_file=None, agents={"gated": claude, "trusted": {**claude, "force": True}}, agent_force=False
    )
    loaded = roles.load(settings)
    base = AgentOptions.from_settings(settings)
    assert roles.agent_options(base, loaded["gated"]).force is False
    assert roles.agent_options(base, loaded["trusted"]).force is True


def test_the_repository_settings_reach_the_options_and_their_policy() -> None:
    settings = Settings(
        _env_file=None,
        agent_workspace_root="/srv/ws",
        repo_allow="/srv/git, https://git.example.com/team/",
        repo_cache_root="/srv/repos",
        repo_max_diff_bytes=2048,
        repo_git_timeout_s=30,
        attachment_max_bytes=10,
        attachment_max_total_bytes=20,
    )
    o = AgentOptions.from_settings(settings)
    assert (o.repo_cache_root, o.repo_max_diff_bytes, o.repo_git_timeout_s) == ("/srv/repos", 2048, 30)
    assert o.repos == RepoPolicy(
        allow=("/srv/git", "https://git.example.com/team/"),
        max_attachment_bytes=10,
        max_attachments_bytes=20,
        private=("/srv/ws", "/srv/repos"),
    )
    assert AgentOptions().repos.allow == (), "by default no repository is taken"


@pytest.mark.parametrize(
    ("changes", "name", "says"),
    [
        ({"repo_allow": "relative/dir"}, "REPO_ALLOW", "neither an absolute folder nor a URL prefix"),
        ({"repo_cache_root": "/srv/ws/repos"}, "REPO_CACHE_ROOT", "must not hold one another"),
        ({"repo_cache_root": "/srv"}, "REPO_CACHE_ROOT", "must not hold one another"),
        ({"repo_max_diff_bytes": 0}, "REPO_MAX_DIFF_BYTES", "greater than 0"),
        ({"repository": {"url": "/srv/git/app.git"}, "role": "coder"}, "AGENTS", "REPO_ALLOW lists no"),
        (
            {"repository": {"url": "/srv/elsewhere/app.git"}, "repo_allow": "/srv/git", "role": "coder"},
            "AGENTS",
            "role 'coder', field repository: the repository /srv/elsewhere/app.git is not allowed",
        ),
        (
            {
                "repository": {"url": "/srv/git/a.git"},
                "repo_allow": "/srv/git",
                "repo_path": "/srv/work",
                "role": "coder",
            },
            "AGENTS",
            "unset AGENT_REPO_PATH",
        ),
        (
            {"repository": {"url": "/srv/git/a.git", "colour": 1}, "role": "coder"},
            "AGENTS",
            "takes url and ref",
        ),
        (
            {"repository": {"url": "/srv/ws/x/ctx"}, "repo_allow": "/srv", "role": "coder"},
            "AGENTS",
            "never a source, whatever REPO_ALLOW says",
        ),
    ],
)
def test_a_bad_repository_option_is_one_line_naming_its_setting(changes: dict, name: str, says: str) -> None:
    with pytest.raises(SettingError) as bad:
        AgentOptions(workspace_root="/srv/ws", **changes)
    assert bad.value.name == name and says in str(bad.value) and "\n" not in str(bad.value)


def test_a_roles_default_repository_reaches_its_options_and_only_a_coding_agent_takes_one() -> None:
    from app import roles

    settings = Settings(
        _env_file=None,
        repo_allow="/srv/git",
        agents={
            "coder": {
                "adapter": "ndjson",
                "command": "/usr/bin/true",
                "repository": {"url": "/srv/git/a.git"},
            },
            "echo": {"adapter": "echo", "repository": {"url": "/srv/git/a.git", "ref": "main"}},
        },
    )
    loaded = roles.load(settings)
    base = AgentOptions.from_settings(settings)
    coder = roles.agent_options(base, loaded["coder"])
    assert coder.repository == {"url": "/srv/git/a.git"}
    assert coder.repos.default == RepoSource("/srv/git/a.git")
    with pytest.raises(SettingError, match="field repository: adapter 'echo' works on no repository"):
        roles.agent_options(base, loaded["echo"])


def test_push_and_its_credential_files_are_checked_at_start_up(tmp_path: Path) -> None:
    from app.agents.jail.sandbox import check
    from app.agents.repos.credentials import Credentials

    token = tmp_path / "secrets" / "push-token"
    token.parent.mkdir()
    token.write_text("tok-5e1f0a\n")
    roots = {"workspace_root": str(tmp_path / "ws"), "repo_cache_root": str(tmp_path / "repos")}
    o = AgentOptions(**roots, push=True, push_token_file=str(token), push_username="bot")
    assert o.repos.push is True and AgentOptions(**roots).repos.push is False
    assert o.push_credentials == Credentials(str(token), "bot", None)
    assert o.push_credentials.token() == "tok-5e1f0a"
    assert AgentOptions(**roots).push_credentials == Credentials(None, "x-access-token", None)

    (tmp_path / "empty").write_text(" \n")
    bad = [
        ({"push_token_file": str(tmp_path / "missing")}, "REPO_PUSH_TOKEN_FILE", "cannot be read"),
        ({"push_token_file": str(tmp_path / "empty")}, "REPO_PUSH_TOKEN_FILE", "holds no token"),
        ({"push_token_file": "secrets/push-token"}, "REPO_PUSH_TOKEN_FILE", "must be an absolute path"),
        ({"push_ssh_key_file": str(tmp_path / "id")}, "REPO_PUSH_SSH_KEY_FILE", "cannot be read"),
        ({"push_username": "a b"}, "REPO_PUSH_USERNAME", "plain user name"),
        ({"push": True, "repo_path": str(tmp_path / "w")}, "REPO_PUSH", "unset AGENT_REPO_PATH"),
        (
            {"push_token_file": str(tmp_path / "missing"), "role": "coder"},
            "AGENTS",
            "role 'coder', field push_token_file: the push token file",
        ),
    ]
    for changes, name, says in bad:
        with pytest.raises(SettingError) as error:
            AgentOptions(**roots, **changes)
        assert error.value.name == name and says in str(error.value), changes
        assert "tok-5e1f0a" not in str(error.value)

    shown = tmp_path / "ws" / "seed-token"
    shown.parent.mkdir()
    shown.write_text("tok-5e1f0a\n")
    jailed = [
        ({"sandbox": "none", "network": "host", "push_token_file": str(token)}, "need the jail"),
        ({"push_token_file": str(shown)}, "which a jail shows its agent"),
        ({"push_token_file": str(token), "sandbox_read": (str(tmp_path / "secrets"),)}, "which a jail shows"),
        ({"push_ssh_key_file": str(token), "home_seed": str(tmp_path)}, "which a jail shows its agent"),
    ]
    for changes, says in jailed:
        with pytest.raises(SettingError, match=says):
            check(AgentOptions(**{**roots, **changes}))


def test_a_roles_push_fields_reach_its_options_and_only_a_coding_agent_takes_them(tmp_path: Path) -> None:
    from app import roles

    token = tmp_path / "token"
    token.write_text("tok-1\n")
    settings = Settings(
        _env_file=None,
        agent_workspace_root=str(tmp_path / "ws"),
        repo_cache_root=str(tmp_path / "repos"),
        agents={
            "coder": {
                "adapter": "ndjson",
                "command": "/usr/bin/true",
                "push": True,
                "push_token_file": str(token),
            },
            "plain": {"adapter": "ndjson", "command": "/usr/bin/true"},
            "echo": {"adapter": "echo", "push": True},
        },
    )
    loaded = roles.load(settings)
    base = AgentOptions.from_settings(settings)
    coder = roles.agent_options(base, loaded["coder"])
    assert (coder.push, coder.push_token_file) == (True, str(token)) and coder.repos.push
    assert roles.agent_options(base, loaded["plain"]).repos.push is False, "REPO_PUSH is off by default"
    with pytest.raises(SettingError, match="field push: adapter 'echo' works on no repository"):
        roles.agent_options(base, loaded["echo"])
