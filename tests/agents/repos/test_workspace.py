"""A Python agent's workspace (`app/agents/workspace.py`) in process, with real git: the folder, checkout and
attached files it is given before `run`, the change artifacts at each end of its turn, and the loader's part
(the rules, the card's extension). The agents are `tests/support/agents/workspace.py`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.agents.cli.repository import EXTENSION_URI
from app.agents.cli.run import WAITING
from app.agents.errors import SettingError
from app.agents.loader import AdapterError, load_agent
from app.agents.options import AgentOptions
from app.agents.sdk import Agent, Part, Request, TaskContext
from app.agents.workspace import Workspaces, attach, repo_policy, serve
from app.protocol.events import ArtifactUpdate, Event, StatusUpdate
from app.protocol.model import Message, Role, TaskState
from tests.agents.repos.conftest import Origin, git, tree_of
from tests.support.agents.workspace import PlainAgent, WorkspaceAgent

CONTEXT = "0123abcd-0000-4000-8000-000000000001"
SPEC = "tests.support.agents.workspace:WorkspaceAgent"


@dataclass
class Ran:
    """What one run emitted, and the context it ran with."""

    ctx: TaskContext
    events: list[Event] = field(default_factory=list)

    def names(self) -> list[str]:
        """The artifacts' names (their first chunks) and the statuses' states, in order."""
        return [
            (e.artifact.name or "") if isinstance(e, ArtifactUpdate) else e.status.state.value
            for e in self.events
            if isinstance(e, StatusUpdate) or (isinstance(e, ArtifactUpdate) and not e.append)
        ]

    def artifact(self, name: str) -> Part:
        (part,) = [
            e.artifact.parts[0]
            for e in self.events
            if isinstance(e, ArtifactUpdate) and e.artifact.name == name
        ]
        return part


def options(tmp_path: Path, origin: Origin, **changes: object) -> AgentOptions:
    fields: dict[str, object] = {
        "workspace_root": str(tmp_path / "ws"),
        "repo_cache_root": str(tmp_path / "cache"),
        "repo_allow": str(origin.bare.parent),
        "repo_git_timeout_s": 60,
    }
    return AgentOptions(**{**fields, **changes})  # type: ignore[arg-type]


def message(text: str, repository: str | None = None, parts: list[Part] | None = None) -> Message:
    metadata = {"repository": {"url": repository}} if repository else None
    return Message("m-1", Role.USER, [Part(text=text), *(parts or [])], context_id=CONTEXT, metadata=metadata)


async def run(
    agent: Agent, msg: Message, answer: Callable[[TaskContext], Awaitable[None]] | None = None
) -> Ran:
    """Serve `agent` on a task of `msg`, as the runner does; `answer` is called at input-required."""
    ran: Ran

    async def emit(batch: list[Event]) -> None:
        ran.events.extend(batch)
        last = batch[-1]
        if isinstance(last, StatusUpdate) and last.status.state is TaskState.INPUT_REQUIRED and answer:
            await answer(ran.ctx)

    ran = Ran(TaskContext(Request(msg, CONTEXT, "alice"), "task-1", emit))
    await serve(agent, ran.ctx)
    if not ran.ctx.finished:
        await ran.ctx.complete()  # as the runner does when `run` returns
    return ran


def loaded(opts: AgentOptions, spec: str = SPEC) -> Agent:
    return load_agent(spec, agent_options=opts)


async def test_the_agent_works_on_a_checkout_and_its_change_comes_back_before_the_end(
    tmp_path: Path, origin: Origin
) -> None:
    ran = await run(loaded(options(tmp_path, origin)), message("EDIT", origin.url))
    ws = ran.ctx.workspace
    assert ws is not None and ws.parent.parent == tmp_path / "ws"
    assert git("symbolic-ref", "--short", "HEAD", cwd=ws) == "a2a/0123abcd"
    assert ran.names() == ["changes", "changes.diff", "turn-1.diff", "completed"]
    ids = [e.artifact.artifact_id for e in ran.events if isinstance(e, ArtifactUpdate)]
    assert ids == ["task-1-changes", "task-1-diff", "task-1-turn-1"]
    summary = ran.artifact("changes").data
    assert summary["base"] == origin.main and summary["head"] == git("rev-parse", "HEAD", cwd=ws)
    assert sorted((f["path"], f["status"]) for f in summary["files"]) == [
        ("notes.md", "added"),
        ("old.txt", "deleted"),
        ("src/app.py", "modified"),
    ]
    assert git("status", "--porcelain", cwd=ws) == "", "the server committed what the agent left"
    patch = ran.artifact("changes.diff").raw
    assert patch is not None and patch == ran.artifact("turn-1.diff").raw
    fresh = tmp_path / "fresh"
    git("clone", "--quiet", str(origin.bare), str(fresh))
    git("checkout", "--quiet", summary["base"], cwd=fresh)
    git("apply", "--index", cwd=fresh, input=patch)
    assert tree_of(fresh) == tree_of(ws)


async def test_an_attachment_is_written_and_handed_to_the_agent_never_part_of_the_change(
    tmp_path: Path, origin: Origin
) -> None:
    spec = Part(raw=b"the spec\n", media_type="text/plain", filename="docs/spec.txt")
    ran = await run(loaded(options(tmp_path, origin)), message("FILES", origin.url, [spec]))
    ws = ran.ctx.workspace
    assert ws is not None
    assert ran.ctx.attachments == [ws / "attachments" / "docs" / "spec.txt"]
    said = "".join(
        p.text or "" for e in ran.events if isinstance(e, ArtifactUpdate) for p in e.artifact.parts
    )
    assert '{"attachments/docs/spec.txt": "the spec\\n"}' in said
    assert ran.artifact("changes").data["files"] == []


async def test_each_turn_publishes_its_own_change_and_a_failed_one_too(
    tmp_path: Path, origin: Origin
) -> None:
    agent = loaded(options(tmp_path, origin))

    async def yes(ctx: TaskContext) -> None:
        ctx.deliver(Message("m-2", Role.USER, [Part(text="yes")]))

    asked = await run(agent, message("ASK", origin.url), answer=yes)
    assert asked.names() == [
        "changes", "changes.diff", "turn-1.diff", "input-required",
        "changes", "changes.diff", "turn-2.diff", "completed",
    ]  # fmt: skip
    turn2 = asked.artifact("turn-2.diff").raw or b""
    assert b"+- after yes" in turn2 and b"+- before asking" not in turn2

    with pytest.raises(RuntimeError, match="broke halfway"):
        await run(agent, message("RAISE"))  # the context's checkout, kept: the message names none
    failed = asked.ctx.workspace
    assert failed is not None and git("log", "-1", "--format=%s", cwd=failed) == "RAISE"
    assert git("show", "--name-only", "--format=", "HEAD", cwd=failed) == "half.txt"


async def test_the_raised_turn_emits_its_change_before_the_runner_fails_the_task(
    tmp_path: Path, origin: Origin
) -> None:
    events: list[Event] = []

    async def emit(batch: list[Event]) -> None:
        events.extend(batch)

    ctx = TaskContext(Request(message("RAISE", origin.url), CONTEXT, "alice"), "task-1", emit)
    with pytest.raises(RuntimeError):
        await serve(loaded(options(tmp_path, origin)), ctx)
    names = [e.artifact.name for e in events if isinstance(e, ArtifactUpdate)]
    assert names == ["changes", "changes.diff", "turn-1.diff"]
    (diff,) = [
        e.artifact.parts[0].raw
        for e in events
        if isinstance(e, ArtifactUpdate) and e.artifact.name == "changes.diff"
    ]
    assert diff is not None and b"+half done" in diff


async def test_without_a_repository_the_workspace_is_a_plain_folder_and_no_change_is_published(
    tmp_path: Path, origin: Origin
) -> None:
    note = Part(raw=b"hi", filename="n.txt")
    ran = await run(loaded(options(tmp_path, origin)), message("WHERE", parts=[note]))
    ws = ran.ctx.workspace
    assert ws is not None and ws.is_dir() and not (ws / ".git").exists()
    assert (
        ran.ctx.attachments == [ws / "attachments" / "n.txt"]
        and (ws / "attachments" / "n.txt").read_bytes() == b"hi"
    )
    assert ran.names() == ["assistant-response", "completed"]


async def test_a_roles_default_repository_is_checked_out_for_a_message_naming_none(
    tmp_path: Path, origin: Origin
) -> None:
    opts = options(tmp_path, origin, repository={"url": origin.url, "ref": "dev"}, role="coder")
    ran = await run(loaded(opts), message("EDIT"))
    assert ran.artifact("changes").data["base"] == origin.dev


async def test_a_source_refused_at_the_run_fails_the_task_and_the_agent_never_runs(
    tmp_path: Path, origin: Origin
) -> None:
    """REPO_ALLOW may have changed since the edge took the message: the run checks again."""
    agent = loaded(options(tmp_path, origin, repo_allow=str(tmp_path / "elsewhere")))
    ran = await run(agent, message("EDIT", origin.url))
    (end,) = [e for e in ran.events if isinstance(e, StatusUpdate)]
    assert end.status.state is TaskState.FAILED
    assert end.status.message is not None and "REPO_ALLOW" in end.status.message.text()
    assert ran.ctx.workspace is None and not list((tmp_path / "ws").glob(f"*/{CONTEXT}"))


async def test_an_agent_without_workspace_runs_as_before(tmp_path: Path, origin: Origin) -> None:
    opts = options(tmp_path, origin)
    plain = load_agent("tests.support.agents.workspace:PlainAgent", agent_options=opts)
    assert plain.workspaces is None and repo_policy(plain) is None
    assert EXTENSION_URI not in [e.uri for e in plain.extensions]
    ran = await run(plain, message("WHERE", parts=[Part(raw=b"hi", filename="n.txt")]))
    assert '"workspace": null' in (ran.events[0].artifact.parts[0].text or "")  # type: ignore[union-attr]
    assert not (tmp_path / "ws").exists() and not (tmp_path / "cache").exists()


def test_the_loader_gives_a_workspace_agent_the_rules_and_its_card_the_extension(
    tmp_path: Path, origin: Origin
) -> None:
    agent = loaded(options(tmp_path, origin))
    assert isinstance(agent.workspaces, Workspaces)
    policy = repo_policy(agent)
    assert policy is not None and policy.allow == (str(origin.bare.parent),)
    (ext,) = [e for e in agent.extensions if e.uri == EXTENSION_URI]
    assert ext.params is not None and ext.params["branch"].startswith("a2a/")
    assert WorkspaceAgent.extensions == (), "the class's own declaration is left as it was"
    closed = loaded(options(tmp_path, origin, repo_allow=""))
    assert closed.workspaces is not None and EXTENSION_URI not in [e.uri for e in closed.extensions]


def test_a_roles_repository_on_an_agent_without_workspace_stops_start_up(
    tmp_path: Path, origin: Origin
) -> None:
    opts = options(tmp_path, origin, repository={"url": origin.url}, role="plain")
    with pytest.raises(
        SettingError, match="role 'plain', field repository: the agent PlainAgent works on no"
    ):
        load_agent("tests.support.agents.workspace:PlainAgent", agent_options=opts)
    assert PlainAgent.workspaces is None


class _Waits(Agent):
    """Writes a file, then waits to be let go before completing."""

    workspace = True

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def run(self, task: TaskContext) -> None:
        assert task.workspace is not None
        (task.workspace / "late.txt").write_text("written before the cancel\n")
        await self.go.wait()
        await task.complete("done")


def test_a_pure_agent_cannot_work_on_a_workspace(tmp_path: Path, origin: Origin) -> None:
    with pytest.raises(AdapterError, match="both `workspace` and `pure`"):
        load_agent("tests.support.agents.workspace:PureAgent", agent_options=options(tmp_path, origin))


async def test_a_cancelled_turn_publishes_nothing_and_its_work_stays_uncommitted(
    tmp_path: Path, origin: Origin
) -> None:
    agent = _Waits()
    attach(agent, options(tmp_path, origin))
    events: list[Event] = []

    async def emit(batch: list[Event]) -> None:
        events.extend(batch)

    ctx = TaskContext(Request(message("go", origin.url), CONTEXT, "alice"), "task-1", emit)
    served = asyncio.create_task(serve(agent, ctx))
    async with asyncio.timeout(30):
        while ctx.workspace is None or not (ctx.workspace / "late.txt").exists():
            await asyncio.sleep(0.01)
    await ctx.cancel()
    agent.go.set()
    with pytest.raises(asyncio.CancelledError):
        await served
    assert events == []
    assert git("status", "--porcelain", cwd=ctx.workspace) == "?? late.txt"


class GatedAgent(WorkspaceAgent):
    """`GATE` writes gated.md and waits for the test to open its gate; anything else as `WorkspaceAgent`."""

    def __init__(self) -> None:
        super().__init__()
        self.at_gate = asyncio.Event()
        self.gate = asyncio.Event()

    async def run(self, task: TaskContext) -> None:
        if task.text.strip() != "GATE":
            await super().run(task)
            return
        assert task.workspace is not None
        (task.workspace / "gated.md").write_text("written before the gate\n")
        self.at_gate.set()
        await self.gate.wait()


async def test_a_second_run_in_the_context_waits_for_the_first_and_starts_from_its_commits(
    tmp_path: Path, origin: Origin
) -> None:
    """As for a CLI (`cli/workspace_lock.py`): the second run of a context says it waits, is given no folder
    until the first has returned, then its turn holds its own change only."""
    agent = GatedAgent()
    attach(agent, options(tmp_path, origin))
    first = asyncio.create_task(run(agent, message("GATE", origin.url)))
    second_events: list[Event] = []

    async def emit(batch: list[Event]) -> None:
        second_events.extend(batch)

    ctx = TaskContext(Request(message("EDIT"), CONTEXT, "alice"), "task-2", emit)
    try:
        await asyncio.wait_for(agent.at_gate.wait(), 30)
        second = asyncio.create_task(serve(agent, ctx))
        async with asyncio.timeout(30):
            while not any(
                isinstance(e, StatusUpdate) and e.status.message and e.status.message.text() == WAITING
                for e in second_events
            ):
                await asyncio.sleep(0.01)
        assert ctx.workspace is None and not second.done(), "not prepared while the first run holds it"
    finally:
        agent.gate.set()
    ran = await first
    await second
    before = ran.artifact("changes").data
    (after,) = [
        e.artifact.parts[0].data
        for e in second_events
        if isinstance(e, ArtifactUpdate) and e.artifact.name == "changes"
    ]
    assert [f["path"] for f in before["turn"]["files"]] == ["gated.md"]
    assert after["turn"]["start"] == before["head"], "the second run started from the first one's commit"
    assert sorted(f["path"] for f in after["turn"]["files"]) == ["notes.md", "old.txt", "src/app.py"]
