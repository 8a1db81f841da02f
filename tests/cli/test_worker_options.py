"""A remote worker's agents run on the worker's own settings, named as the worker: a repository its REPO_ALLOW
refuses is refused naming the worker's setting (the server admitted it with its own), and its CLIs are
tagged `worker:<instance>:<workspace root>`, never as a replica of the same machine or a worker of another
cluster named alike (whose start-up would kill them as its orphans); the worker's CHECKPOINT_S reaches its
CLI agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import roles as roles_
from app.agents.cli.run import CliAgent
from app.agents.options import AgentOptions
from app.agents.repos.errors import RepoError
from app.cli.worker import worker_options
from app.settings import Settings


def settings(tmp_path: Path, allow: str) -> Settings:
    return Settings(
        _env_file=None,
        agent_sandbox="none",
        repo_allow=allow,
        agent_workspace_root=str(tmp_path / "ws"),
        repo_cache_root=str(tmp_path / "cache"),
    )


def test_a_workers_options_are_its_own_settings_named_as_the_worker(tmp_path: Path) -> None:
    own = settings(tmp_path, str(tmp_path / "git"))
    options = worker_options(own, "vm1")
    assert (options.worker, options.owner) == ("vm1", f"worker:vm1:{(tmp_path / 'ws').resolve()}")
    other = worker_options(settings(tmp_path / "other", str(tmp_path / "git")), "vm1")
    assert other.owner != options.owner, "a worker named alike on another root is not its orphan"
    assert options.owner != AgentOptions.from_settings(own).owner, "a replica's tag is not reused"
    assert (options.workspace_root, options.repo_cache_root) == (
        own.agent_workspace_root,
        own.repo_cache_root,
    )
    assert options.repos.allow == (str(tmp_path / "git"),)
    with pytest.raises(RepoError, match="the worker's REPO_ALLOW"):
        options.repos.named({"repository": str(tmp_path / "elsewhere" / "app.git")})
    with pytest.raises(RepoError, match="the worker's workspaces"):
        worker_options(settings(tmp_path, str(tmp_path)), "vm1").repos.named(
            {"repository": str(tmp_path / "ws" / "someone" / "ctx")}
        )
    with pytest.raises(RepoError, match="this worker takes no repository"):
        worker_options(settings(tmp_path, ""), "vm1").repos.named({"repository": "/srv/git/app.git"})


def test_a_servers_refusal_names_the_servers_setting(tmp_path: Path) -> None:
    options = AgentOptions.from_settings(settings(tmp_path, str(tmp_path / "git")))
    assert options.worker is None
    with pytest.raises(RepoError, match="the server's REPO_ALLOW"):
        options.repos.named({"repository": str(tmp_path / "elsewhere" / "app.git")})


def test_checkpoint_s_reaches_a_workers_cli_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CHECKPOINT_S in the worker's environment is how often its CLI runs save their checkpoints, as the
    worker process builds its role's agent (`main`: `role_agent` over `worker_options`)."""
    monkeypatch.setenv("CHECKPOINT_S", "7.5")
    own = Settings(
        _env_file=None,
        agent_sandbox="none",
        agent_workspace_root=str(tmp_path / "ws"),
        repo_cache_root=str(tmp_path / "cache"),
        agents={"coder": {"adapter": "claude-code"}},
    )
    role = roles_.load(own)["coder"]
    agent = roles_.role_agent(own, role, False, worker_options(own, "vm1"))
    assert isinstance(agent, CliAgent)
    assert (agent.options.checkpoint_s, agent.options.worker) == (7.5, "vm1")
