"""A CLI run's checkpoints (`app/agents/cli/checkpoint.py`): the real Claude Code, Codex and Gemini CLI, in
their jail, against the fake model APIs (and the `ndjson` adapter with its fake command), driven in-process
through the agent API with an in-memory checkpoint store.

Two "machines" are two workspace roots (each with its principal's HOME): a task's run on the first saves a
checkpoint; a run of the same task on the second, resumed, restores it where the second keeps its workspace
and where its CLI looks for its session, and the CLI goes on with the first run's conversation, told the
resume note. What cannot be used (none, corrupt, cut, another adapter's, unsafe members) fails the run with
the reason and restores nothing.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.agents.checkpoints import Checkpoint, CheckpointError, Resumed
from app.agents.cli.checkpoint import Place, capture, restore
from app.agents.cli.claude import ClaudeAgent, claude_project
from app.agents.cli.codex import CodexAgent
from app.agents.cli.gemini import GeminiAgent
from app.agents.cli.ndjson import NdjsonAgent
from app.agents.cli.run import CliAgent, CliRun
from app.agents.options import AgentOptions
from app.agents.sdk import Request, TaskContext
from app.protocol.events import ArtifactUpdate, Event, StatusUpdate
from app.protocol.model import Message, Part, Role, TaskState
from tests.cli.test_cli_fakes import NDJSON
from tests.support.clis import CLI_BIN, FAKES, alive, install_clis
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.base import FakeServer
from tests.support.fakes.gemini_fake import GeminiFake, gemini_env, write_gemini_home
from tests.support.fakes.openai_fake import API_KEY_ENV, OpenAIFake, write_codex_home

PRINCIPAL = "alice"
CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
RESUMED = Resumed(attempt=2, previous="replica r1", reason="replica r1 stopped renewing its lease")


class MemoryStore:
    """A task's checkpoint store in memory (the server's is `store/run_checkpoints.py`)."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.point: Checkpoint | None = None
        self.saves = 0
        self.broken: str | None = None
        """Set: `load` raises CheckpointError with it (a digest that does not match)."""

    async def save(self, data: bytes, manifest: dict[str, Any]) -> None:
        self.point = Checkpoint(data, json.loads(json.dumps(manifest)), datetime.now(UTC), "test")
        self.saves += 1

    async def load(self) -> Checkpoint | None:
        if self.broken is not None:
            raise CheckpointError(self.broken)
        return self.point


class Outcome:
    def __init__(self, events: list[Event], run: CliRun) -> None:
        self.events, self.run = events, run

    @property
    def last(self) -> StatusUpdate:
        return [e for e in self.events if isinstance(e, StatusUpdate)][-1]

    @property
    def state(self) -> TaskState:
        return self.last.status.state

    @property
    def text(self) -> str:
        message = self.last.status.message
        return message.text() if message is not None else ""


class Machine:
    """One machine's agent: its workspace root (and so its principal's HOME)."""

    def __init__(self, agent: CliAgent, root: Path) -> None:
        self.agent, self.root = agent, root
        self.runs: list[CliRun] = []
        start = agent.start

        def keep(request: Request) -> Any:
            run = start(request)
            self.runs.append(run)  # type: ignore[arg-type]
            return run

        agent.start = keep  # type: ignore[method-assign]

    def context(
        self,
        text: str,
        store: MemoryStore | None,
        *,
        context: str,
        task: str,
        resumed: Resumed | None = None,
        history: list[Message] | None = None,
        answer: Callable[[], str] | None = None,
    ) -> tuple[TaskContext, list[Event]]:
        """`answer`: called when the task asks (input-required); what it returns is the user's answer."""
        events: list[Event] = []

        async def emit(batch: list[Event]) -> None:
            events.extend(batch)
            last = batch[-1]
            if isinstance(last, StatusUpdate) and last.status.state is TaskState.INPUT_REQUIRED:
                assert answer is not None, "the task asked"
                ctx.deliver(Message(uuid.uuid4().hex, Role.USER, [Part(text=answer())]))

        message = Message(uuid.uuid4().hex, Role.USER, [Part(text=text)], context_id=context, task_id=task)
        ctx = TaskContext(Request(message, context, PRINCIPAL, history=history or []), task, emit)
        ctx.checkpoints = store
        ctx.resumed = resumed
        return ctx, events

    async def run(self, text: str, store: MemoryStore | None, **kw: Any) -> Outcome:
        ctx, events = self.context(text, store, **kw)
        async with asyncio.timeout(120):
            await self.agent.run(ctx)
        return Outcome(events, self.runs[-1])

    def workspace(self, context: str) -> Path:
        return self.runs[-1].workspace.parent / context

    @property
    def home(self) -> Path:
        return self.runs[-1].workspace.parent / ".home"


@pytest.fixture(scope="module", params=["codex", "gemini"])
def model_cli(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeServer]]:
    """Codex (`codex exec`) and Gemini CLI (`gemini -p`) unattended, each with its model API's fake."""
    install_clis()
    fake = OpenAIFake() if request.param == "codex" else GeminiFake()
    yield request.param, fake
    fake.close()


def _claude(root: Path, fake: FakeAnthropic, **values: Any) -> ClaudeAgent:
    options = AgentOptions(
        workspace_root=str(root),
        repo_cache_root=str(root.parent / f"{root.name}-repos"),
        claude_bin=str(CLI_BIN / "claude"),
        env={**CLAUDE_ENV, "ANTHROPIC_BASE_URL": fake.url},
        egress_allow=fake.url.removeprefix("http://"),
        cancel_grace_s=2,
        **values,
    )
    return ClaudeAgent(options)


def _unattended(name: str, root: Path, fake: FakeServer) -> CliAgent:
    """Codex or Gemini CLI, its HOME seeded with its configuration (AGENT_HOME_SEED), as a server runs it."""
    seed = root.parent / f"{root.name}-seed"
    if name == "codex":
        write_codex_home(seed / ".codex", fake.url)
        cli = {"codex_bin": str(CLI_BIN / "codex"), "env": {API_KEY_ENV: "sk-test"}}
    else:
        env = gemini_env(fake.url, write_gemini_home(seed))
        del env["HOME"]
        cli = {"gemini_bin": str(CLI_BIN / "gemini"), "env": env}
    options = AgentOptions(
        workspace_root=str(root),
        repo_cache_root=str(root.parent / f"{root.name}-repos"),
        home_seed=str(seed),
        egress_allow=fake.url.removeprefix("http://"),
        cancel_grace_s=2,
        **cli,  # type: ignore[arg-type]
    )
    return CodexAgent(options) if name == "codex" else GeminiAgent(options)


@pytest.fixture
async def claude_machines(fake_api: FakeAnthropic, tmp_path: Path) -> AsyncIterator[tuple[Machine, Machine]]:
    """Machines A and B; their roots' names need Claude Code's escaping (`.`, `_`)."""
    a = Machine(_claude(tmp_path / "root.a_1", fake_api), tmp_path / "root.a_1")
    b = Machine(_claude(tmp_path / "root.b_2", fake_api), tmp_path / "root.b_2")
    try:
        yield a, b
    finally:
        await a.agent.aclose()
        await b.agent.aclose()


def _ids() -> dict[str, str]:
    return {"context": f"ctx-{uuid.uuid4().hex[:8]}", "task": f"task-{uuid.uuid4().hex[:8]}"}


def _claude_requests_since(fake: FakeAnthropic, n: int) -> list[list[str]]:
    """The user prompts of each conversation request Claude made after the `n`th (not its helpers')."""
    return [p for p in fake.prompts()[n:] if p]


async def test_claude_resumes_on_another_machine_with_the_first_runs_session(
    claude_machines: tuple[Machine, Machine], fake_api: FakeAnthropic
) -> None:
    a, b = claude_machines
    ids, store = _ids(), MemoryStore()
    first = await a.run("RUN: echo made-on-a > made.txt", store, **ids)
    assert first.state is TaskState.COMPLETED, first.text
    sid = first.run.session_id()
    assert sid and store.point is not None
    project = a.home / ".claude" / "projects" / claude_project(str(a.workspace(ids["context"])))
    assert (project / f"{sid}.jsonl").is_file(), "the escaping is not the CLI's: no session file there"
    manifest = store.point.manifest
    assert manifest["adapter"] == "claude-code" and manifest["sessionId"] == sid
    assert manifest["workspace"] == str(a.workspace(ids["context"]))
    assert f".claude/projects/{project.name}/{sid}.jsonl" in manifest["holds"]["home"]
    assert set(manifest["holds"]["records"]) >= {"session"}

    before = len(fake_api.requests)
    second = await b.run("RUN: echo made-on-a > made.txt", store, resumed=RESUMED, **ids)
    assert second.state is TaskState.COMPLETED, second.text
    workspace = b.workspace(ids["context"])
    assert workspace != a.workspace(ids["context"])
    assert (workspace / "made.txt").read_text().strip() == "made-on-a"
    argv = second.run.proc.argv if second.run.proc else []
    assert argv[argv.index("--resume") + 1] == sid
    asked = _claude_requests_since(fake_api, before)
    assert asked and asked[0][0] == "RUN: echo made-on-a > made.txt", "the first turn's conversation"
    assert asked[0][-1] == RESUMED.note(), "the resumed CLI is told the note, not the prompt again"
    moved = b.home / ".claude" / "projects" / claude_project(str(workspace)) / f"{sid}.jsonl"
    assert moved.is_file()


async def test_claude_saves_while_it_waits_for_approval_and_an_answer_elsewhere_restores_it(
    claude_machines: tuple[Machine, Machine], fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    """A's run asks for approval: its checkpoint is saved while Claude waits (the session named). A later
    turn of the task on B (its history not empty, no session of it here) restores it, and the user's text
    is the prompt (no note)."""
    _, b = claude_machines
    a = Machine(_claude(tmp_path / "root.asks", fake_api, force=False), tmp_path / "root.asks")
    ids, store = _ids(), MemoryStore()
    asked: list[Checkpoint | None] = []

    def allow() -> str:
        asked.append(store.point)
        return "y"

    try:
        first = await a.run("RUN: echo waited > waited.txt", store, answer=allow, **ids)
    finally:
        await a.agent.aclose()
    assert first.state is TaskState.COMPLETED, first.text
    assert asked and asked[0] is not None, "no checkpoint while it waited for approval"
    assert asked[0].manifest["sessionId"] == first.run.session_id()
    history = [Message(uuid.uuid4().hex, Role.USER, [Part(text="RUN: echo waited > waited.txt")])]
    second = await b.run("RECALL", store, history=history, **ids)
    assert second.state is TaskState.COMPLETED, second.text
    assert (b.workspace(ids["context"]) / "waited.txt").is_file()
    said = "".join(
        p.text or "" for e in second.events if hasattr(e, "artifact") for p in e.artifact.parts if p.text
    )
    assert "The first prompt was: RUN: echo waited > waited.txt" in said


def _good_checkpoint(tmp: Path, adapter: str) -> Checkpoint:
    """A checkpoint as a run on another machine takes it: a workspace (incompressible, so a cut one is
    cut inside its files) and a session file."""
    place = _place(tmp)
    place.workspace.mkdir(parents=True)
    (place.workspace / "kept.bin").write_bytes(os.urandom(64 * 1024))
    session = place.home / ".claude" / "projects" / "-elsewhere" / "s-1.jsonl"
    session.parent.mkdir(parents=True)
    session.write_text("{}\n")
    data, manifest = capture(place, [session], {"adapter": adapter, "sessionId": "s-1"}, 10**8)
    return Checkpoint(data, manifest, datetime.now(UTC), "test")


@pytest.mark.parametrize("adapter", ["claude-code", "codex", "gemini"])
async def test_resume_refused_for_a_missing_corrupt_cut_foreign_or_unsafe_checkpoint(
    adapter: str, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    """Each fails the run with the reason before any CLI starts, and restores nothing."""
    root = tmp_path / "b"
    offline = SimpleNamespace(url="http://127.0.0.1:9")  # no CLI starts: no model is asked
    agent = _claude(root, offline) if adapter == "claude-code" else _unattended(adapter, root, offline)  # type: ignore[arg-type]
    b = Machine(agent, root)
    good = _good_checkpoint(tmp_path / "a", adapter)
    other = "codex" if adapter != "codex" else "gemini"

    def cases() -> Iterator[tuple[MemoryStore, str]]:
        yield MemoryStore(), "cannot resume: the task has no checkpoint"
        broken = MemoryStore()
        broken.broken = "its digest does not match"
        yield broken, "cannot resume: the task's checkpoint cannot be used: its digest does not match"
        cut = MemoryStore()
        cut.point = Checkpoint(good.data[: len(good.data) // 2], good.manifest, good.taken_at, "test")
        yield cut, "cannot resume: the task's checkpoint cannot be used: its archive cannot be read"
        foreign = MemoryStore()
        foreign.point = Checkpoint(good.data, {**good.manifest, "adapter": other}, good.taken_at, "test")
        yield foreign, f"it was taken by the '{other}' adapter, not '{adapter}'"
        unsafe = MemoryStore()
        evil = _tar(
            (tarfile.TarInfo("workspace/kept.txt"), b"x"), (tarfile.TarInfo("workspace/../../x"), b"x")
        )
        unsafe.point = Checkpoint(evil, good.manifest, good.taken_at, "test")
        yield unsafe, "the archive's member 'workspace/../../x' points outside its folder"

    ids = _ids()
    try:
        for refused, reason in cases():
            out = await b.run("go on", refused, resumed=RESUMED, **ids)
            assert out.state is TaskState.FAILED and reason in out.text, out.text
            assert out.run.proc is None, "no CLI started"
            assert not b.workspace(ids["context"]).exists(), "nothing restored"
            assert not list(b.home.rglob("s-1.jsonl")), "no session file restored"
            assert not (tmp_path / "x").exists()
    finally:
        await agent.aclose()


async def test_claude_checkpoint_over_max_bytes_is_not_saved(
    claude_machines: tuple[Machine, Machine], caplog: pytest.LogCaptureFixture
) -> None:
    a, _ = claude_machines
    store = MemoryStore(max_bytes=64)
    with caplog.at_level(logging.WARNING, logger="app.agents.cli.checkpoint"):
        out = await a.run("say hi", store, **_ids())
    assert out.state is TaskState.COMPLETED, out.text
    assert store.point is None and store.saves == 0
    assert "passed 64 bytes" in caplog.text
    assert not [e for e in out.events if "checkpoint" in str(e)], "nothing told the task"


async def test_claude_saves_periodically_and_drain_stops_it_and_saves(
    fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    """A CLI waiting on the model (HANG) is saved every checkpoint_s; a drain stops it without a word to the
    task and saves once more."""
    machine = Machine(_claude(tmp_path / "ws", fake_api, checkpoint_s=0.3), tmp_path / "ws")
    store = MemoryStore()
    ctx, events = machine.context("HANG", store, **_ids())
    running = asyncio.create_task(machine.agent.run(ctx))
    try:
        async with asyncio.timeout(60):
            while store.saves < 2 or not machine.runs or machine.runs[-1].proc is None:
                await asyncio.sleep(0.05)
        proc = machine.runs[-1].proc
        assert proc is not None and proc.returncode is None and alive(proc.pid), "saved while it runs"
        saves = store.saves
        assert await ctx.drain() is True
        assert store.saves > saves
        assert proc.returncode is not None and not alive(proc.pid)
        await asyncio.wait([running], timeout=30)  # its emissions after the drain raise CancelledError
        assert running.done()
    finally:
        running.cancel()
        await machine.agent.aclose()
    states = [e.status.state for e in events if isinstance(e, StatusUpdate)]
    assert TaskState.FAILED not in states and TaskState.COMPLETED not in states


async def test_codex_and_gemini_resume_on_another_machine_with_the_first_runs_session(
    model_cli: tuple[str, FakeServer], tmp_path: Path
) -> None:
    name, fake = model_cli
    a = Machine(_unattended(name, tmp_path / "root.a_1", fake), tmp_path / "root.a_1")
    b = Machine(_unattended(name, tmp_path / "root.b_2", fake), tmp_path / "root.b_2")
    try:
        ids, store = _ids(), MemoryStore()
        first = await a.run("FAKE:tool:made.txt", store, **ids)
        assert first.state is TaskState.COMPLETED, first.text
        sid = first.run.session_id()
        assert sid and store.point is not None
        manifest = store.point.manifest
        assert manifest["adapter"] == name and manifest["sessionId"] == sid
        assert manifest["holds"]["home"], manifest

        before = len(fake.requests)
        second = await b.run("FAKE:tool:made.txt", store, resumed=RESUMED, **ids)
        assert second.state is TaskState.COMPLETED, second.text
        workspace = b.workspace(ids["context"])
        assert workspace != a.workspace(ids["context"])
        assert (workspace / "made.txt").read_text().strip() == "hi"
        argv = second.run.proc.argv if second.run.proc else []
        option = "resume" if name == "codex" else "--resume"
        assert argv[argv.index(option) + 1] == sid
        assert argv[-1] in (RESUMED.note(), f"--prompt={RESUMED.note()}"), "the note, not the prompt again"
        bodies = [json.dumps(body) for _, _, body in fake.requests[before:] if isinstance(body, dict)]
        assert any(
            "FAKE:tool:made.txt" in b and "previous run of this task was interrupted" in b for b in bodies
        )
    finally:
        await a.agent.aclose()
        await b.agent.aclose()


async def test_ndjson_resumes_on_another_machine_told_the_note_in_its_restored_workspace(
    tmp_path: Path,
) -> None:
    """A command of the operator's own keeps no session the server knows: its workspace is carried, and the
    resumed run's prompt line has the note as its text (the fake reports the file it found)."""

    def machine(root: Path) -> Machine:
        options = AgentOptions(
            workspace_root=str(root), command=NDJSON, sandbox_read=(str(FAKES),), cancel_grace_s=2
        )
        return Machine(NdjsonAgent(options), root)

    a, b = machine(tmp_path / "root-a"), machine(tmp_path / "root-b")
    try:
        ids, store = _ids(), MemoryStore()
        first = await a.run("WORK 1 0", store, **ids)
        assert first.state is TaskState.COMPLETED, first.text
        assert store.point is not None and store.point.manifest["adapter"] == "ndjson"
        second = await b.run("WORK 1 0", store, resumed=RESUMED, **ids)
        assert second.state is TaskState.COMPLETED, second.text
        assert (b.workspace(ids["context"]) / "progress.txt").read_text() == ids["task"]
        said = "".join(
            p.text or "" for e in second.events if isinstance(e, ArtifactUpdate) for p in e.artifact.parts
        )
        assert f"resumed with progress.txt of {ids['task']}" in said, said
    finally:
        await a.agent.aclose()
        await b.agent.aclose()


# ---- the archive itself ----------------------------------------------------------------------------


def _place(root: Path) -> Place:
    home = root / "p" / ".home"
    home.mkdir(parents=True, exist_ok=True)
    return Place(root / "p", root / "p" / "ctx", home, {"session": root / "p" / ".sessions" / "s.json"})


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _symlink(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([(tarfile.TarInfo("workspace/../../evil.txt"), b"x")], "points outside its folder"),
        ([(tarfile.TarInfo("/etc/evil.txt"), b"x")], "points outside its folder"),
        ([(tarfile.TarInfo("workspace/ok.txt"), b"x"), _symlink("workspace/l", "/etc/passwd")], "link"),
        ([_symlink("workspace/l", "../../../outside")], "link"),
        ([(tarfile.TarInfo("elsewhere/x"), b"x")], "which no checkpoint holds"),
    ],
)
def test_an_archive_with_unsafe_members_is_refused_and_restores_nothing(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], reason: str
) -> None:
    place = _place(tmp_path)
    with pytest.raises(CheckpointError, match=reason):
        restore(_tar(*members), place, lambda rel: rel)
    assert not place.workspace.exists()
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    assert sorted(p.name for p in place.root.iterdir()) == [".home"], "no temporary folder left"


def test_a_checkout_borrowing_objects_is_archived_whole_and_a_link_out_is_left_out(tmp_path: Path) -> None:
    """A clone with `alternates` (`--shared`) restores where its source is gone; a link out of the
    workspace is not archived (a restore would refuse it), nor a lock git held when it was taken."""
    origin = tmp_path / "origin"
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    (origin / "a.txt").write_text("from origin\n")
    subprocess.run([*git, "-C", str(origin), "add", "a.txt"], check=True)
    subprocess.run([*git, "-C", str(origin), "commit", "-qm", "one"], check=True)
    place = _place(tmp_path / "m1")
    subprocess.run(["git", "clone", "-q", "--shared", str(origin), str(place.workspace)], check=True)
    assert (place.workspace / ".git" / "objects" / "info" / "alternates").is_file()
    (place.workspace / "out").symlink_to("/etc/hostname")
    (place.workspace / "in").symlink_to("a.txt")
    (place.workspace / "here").symlink_to(".")
    (place.workspace / "sub").mkdir()
    (place.workspace / "sub" / "up").symlink_to("../here/..")  # inside as written, outside as followed
    (place.workspace / ".git" / "index.lock").write_text("")  # a git command at work when it was taken
    data, manifest = capture(place, None, {"adapter": "test"}, 10**8)
    assert sorted(manifest["skipped"]) == ["workspace/out", "workspace/sub/up"]
    subprocess.run(["rm", "-rf", str(origin)], check=True)
    there = _place(tmp_path / "m2")
    restore(data, there, lambda rel: rel)
    assert not (there.workspace / ".git" / "objects" / "info" / "alternates").exists()
    assert not (there.workspace / ".git" / "index.lock").exists()
    fsck = subprocess.run(
        ["git", "-C", str(there.workspace), "fsck", "--full"], capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stderr
    log = subprocess.run(
        ["git", "-C", str(there.workspace), "log", "--format=%s"], capture_output=True, text=True
    )
    assert log.stdout.strip() == "one"
    assert (there.workspace / "in").read_text() == "from origin\n" and not (there.workspace / "out").exists()
    assert (there.workspace / "here").is_symlink() and not (there.workspace / "sub" / "up").exists()


def test_claude_project_names_match_the_cli_escaping() -> None:
    """Every code unit but ASCII letters and digits is `-`; past 200 cut and the path's hash added (the
    values from Claude Code 2.1.197's own function, run in node)."""
    assert claude_project("/tmp/root.a_1/ab12/ctx-1") == "-tmp-root-a-1-ab12-ctx-1"
    assert claude_project("/tmp/é😀x") == "-tmp----x"
    long = "/" + "a" * 250
    assert claude_project(long) == "-" + "a" * 199 + "-feo44x"
