"""A Python agent's workspace: what a CLI run gets (`cli/repository.py`), for an agent that declares
`workspace = True` (`sdk.Agent`).

The loader gives such an agent the role's rules (`attach`: REPO_ALLOW, the role's default repository, the
limits, the cache); the edge then checks a message's repository and files with them (-32602) and the card
declares the repository extension, as for a CLI role. Before the agent's `run` starts, `serve` makes the
context's folder (`cli.folders.workspace`), a checkout of the repository the message names (or the role's
default, or the one the context already has) and the attached files (`RunRepository.prepare`), and hands them
to the agent as `TaskContext.workspace` and `TaskContext.attachments`; at each end of a turn (`ask`,
`ask_auth`, `complete`, `fail`, `reject`, returning, raising) the change is published as the same artifacts,
measured by the same `collect`; one run at a time works in a context's folder (the CLI runs' lock). There
is no jail: the agent runs in the server's process, and so do the git commands on its checkout. An agent
without `workspace` gets none of this and pays nothing for it.
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

from .cli.folders import workspace, workspace_lock
from .cli.repository import RunRepository, extension
from .cli.run import WAITING, CliAgent
from .cli.sweep import in_use
from .options import AgentOptions
from .repos.cache import RepoCache
from .repos.errors import RepoError
from .repos.policy import RepoPolicy
from .sdk import Agent, TaskContext


class Workspaces:
    """A workspace agent's share of the role's options: its repository rules and cache."""

    def __init__(self, options: AgentOptions) -> None:
        self.options = options
        self.repos = options.repos
        self.cache = RepoCache(Path(options.repo_cache_root), timeout_s=options.repo_git_timeout_s)

    async def serve(self, agent: Agent, task: TaskContext) -> None:
        """Wait for the context's folder (one run at a time in it, as for a CLI: `cli/workspace_lock.py`),
        prepare it, run the agent in it, and publish the change at each turn's end."""
        lock = workspace_lock(self.options, task.principal, task.context_id)
        try:
            if lock is not None and not lock.take():
                await task.working(WAITING)
                await lock.wait(lambda: False)  # a cancel cancels this coroutine, and the wait with it
            await self._serve(agent, task)
        finally:
            if lock is not None:
                lock.release()

    async def _serve(self, agent: Agent, task: TaskContext) -> None:
        """The folder marked as the context's and held against the workspace sweep meanwhile, as a CLI
        run's (but the operator's AGENT_REPO_PATH, never swept)."""
        folder = workspace(self.options, task.principal, task.context_id)
        held: contextlib.AbstractAsyncContextManager[None] = (
            contextlib.nullcontext()
            if self.options.repo_path
            else in_use(folder, task.principal, task.context_id)
        )
        async with held:
            repo = RunRepository(self.repos, self.cache, self.options, task, folder)
            try:
                await repo.prepare(None)
                folder.mkdir(parents=True, exist_ok=True)
            except (RepoError, OSError) as exc:
                await task.fail(f"The task's workspace could not be prepared: {exc}")
                return
            task.workspace = folder
            task.attachments = [folder / name for name in repo.attached]
            task.on_turn_end(partial(_publish, task, repo))
            try:
                await agent.run(task)
            except Exception:
                await _publish(task, repo)  # the failed turn's change, before the runner fails the task
                raise


async def _publish(task: TaskContext, repo: RunRepository) -> None:
    """The turn's change as artifacts; nothing once the task has ended or was cancelled."""
    if task.finished:
        return
    for ev in await repo.turn_end():
        await task.artifact(ev.parts or [], artifact_id=ev.artifact_id, name=ev.text or None, last_chunk=True)


def attach(agent: Agent, options: AgentOptions) -> None:
    """Give an agent that declares `workspace` the role's rules, and its card the repository extension when
    repositories are taken; a CLI adapter has its own (`CliAgent`). SettingError for a role's default
    repository on an agent that works on none."""
    if isinstance(agent, CliAgent):
        return
    if not agent.workspace:
        if options.repository is not None:
            name = type(agent).__name__
            raise options.error(
                "repository", f"the agent {name} works on no repository (no `workspace = True`)"
            )
        return
    agent.workspaces = Workspaces(options)
    if options.repos.takes_repositories:
        ext = extension(options)
        agent.extensions = (*(e for e in agent.extensions if e.uri != ext.uri), ext)


def repo_policy(agent: Agent) -> RepoPolicy | None:
    """What repository and files a message to `agent` may bring; None for an agent that takes none."""
    if isinstance(agent, CliAgent):
        return agent.repos
    return agent.workspaces.repos if isinstance(agent.workspaces, Workspaces) else None


def approval_mode(agent: Agent) -> bool | None:
    """The approval mode of a coding-agent CLI's role (`force`: True runs unattended); None for an agent
    with none."""
    return agent.options.force if isinstance(agent, CliAgent) else None


async def serve(agent: Agent, task: TaskContext) -> None:
    """Run `agent` on `task`: in its workspace when it declares one (`Workspaces.serve`), else as it is."""
    if agent.workspaces is None:
        await agent.run(task)
    else:
        await agent.workspaces.serve(agent, task)
