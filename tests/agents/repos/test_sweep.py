"""The workspace sweep (`agents/cli/sweep.py`) on real folders, real git and a real store (both databases):
exactly the workspaces of contexts that ended before the cutoff, or have no task left, go (a checkout's
work kept in its mirror first); a context with a task waiting, a recent one, another owner's context of
the same id, a workspace a run holds and one no run marked all stay; the sizes are what is on disk; the
kept refs go one retention period later; a run waits for a removal in progress and marks its workspace
again."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from app.agents.cli.sweep import KEPT, LEDGERS, MARKS, STAMP, Sweep, _locked, disk_bytes, in_use
from app.agents.jail.sandbox import principal_key
from app.agents.repos.cache import RepoCache
from app.agents.repos.source import RepoSource
from app.protocol.model import TaskState, utcnow
from app.store.db import create_engine
from app.store.retention import Pruning
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.fill import Spec, fill

from .conftest import commit_all, git

NOW = utcnow()
OLD = NOW - timedelta(days=40)
CUTOFF = NOW - timedelta(days=30)


@pytest.fixture(params=BACKENDS)
async def engine(request, tmp_path):
    url = await migrated_database_url(request.param, tmp_path)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


def sweep_of(root: Path, cache: RepoCache, engine) -> Sweep:
    return Sweep(root, cache, Pruning(engine).contexts, retention_days=30, interval_s=600)


async def workspace(root: Path, owner: str, context_id: str, size: int = 1000) -> Path:
    """A context's workspace as a run leaves it: marked, with a file of `size` bytes and a session file."""
    path = root / principal_key(owner) / context_id
    path.mkdir(parents=True)
    async with in_use(path, owner, context_id):
        (path / "work.bin").write_bytes(os.urandom(size))
    session = root / principal_key(owner) / ".sessions" / "ndjson" / f"{context_id}.json"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text('{"sessionId": "s"}')
    return path


async def test_only_the_workspaces_of_ended_contexts_go_and_their_work_stays_in_the_mirror(
    engine, cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    await fill(engine, 2, Spec(owner="alice", at=OLD, contexts=1, tag="old"))
    await fill(engine, 1, Spec(owner="alice", at=OLD, contexts=1, tag="recent"))
    await fill(engine, 1, Spec(owner="alice", at=NOW - timedelta(days=29), contexts=1, tag="recent"))
    await fill(engine, 1, Spec(owner="alice", at=OLD, contexts=1, tag="waiting"))
    await fill(
        engine, 1, Spec(owner="alice", at=OLD, contexts=1, tag="waiting", state=TaskState.INPUT_REQUIRED)
    )
    await fill(engine, 1, Spec(owner="bob", at=NOW, contexts=1, tag="old"))
    await fill(engine, 1, Spec(owner="alice", at=OLD, contexts=1, tag="held"))

    # old-ctx-0: alice's checkout, ended 40 days ago, with a commit of the agent's.
    old = root / principal_key("alice") / "old-ctx-0"
    checkout = await cache.checkout(source, old, "a2a/01234567")
    async with in_use(old, "alice", "old-ctx-0"):
        (old / "agent.txt").write_text("the agent's work\n")
        head = commit_all(old, "agent's work")
    gone_ctx = await workspace(root, "alice", "no-task-left", 5000)
    stays = {
        "recent": await workspace(root, "alice", "recent-ctx-0"),
        "waiting": await workspace(root, "alice", "waiting-ctx-0"),
        "bob's": await workspace(root, "bob", "old-ctx-0"),
        "held": await workspace(root, "alice", "held-ctx-0"),
    }
    unmarked = root / principal_key("alice") / "by-hand"
    unmarked.mkdir()
    (unmarked / "f").write_bytes(b"x" * 3000)
    sizes = {p: disk_bytes(p) for p in [old, gone_ctx, unmarked, *stays.values()]}
    sweep = sweep_of(root, cache, engine)

    assert (await sweep.run_once(None)).removed == 0, "TASK_RETENTION_DAYS=0 removes nothing"
    dry = await sweep.run_once(CUTOFF, dry_run=True)
    assert (dry.removed, dry.freed_bytes) == (3, sizes[old] + sizes[gone_ctx] + sizes[stays["held"]])
    assert all(p.is_dir() for p in sizes), "a dry run removes nothing"

    async with in_use(stays["held"], "alice", "held-ctx-0"):
        done = await sweep.run_once(CUTOFF)
    assert (done.removed, done.freed_bytes, done.busy, done.unmarked) == (
        2,
        sizes[old] + sizes[gone_ctx],
        1,
        1,
    )
    assert (done.kept_refs, done.workspaces) == (1, 5)
    assert done.workspace_bytes == sum(disk_bytes(p) for p in [unmarked, *stays.values()])
    assert done.cache_bytes == disk_bytes(cache.root) > 0
    assert not old.exists() and not gone_ctx.exists()
    assert all(p.is_dir() for p in [unmarked, *stays.values()])
    alice = root / principal_key("alice")
    assert sorted(p.name for p in (alice / MARKS).iterdir()) == [
        "held-ctx-0.json",
        "recent-ctx-0.json",
        "waiting-ctx-0.json",
    ]
    assert sorted(p.name for p in (alice / ".sessions" / "ndjson").iterdir()) == [
        "held-ctx-0.json",
        "recent-ctx-0.json",
        "waiting-ctx-0.json",
    ]
    mirror = cache.path(source)
    (kept,) = git("--git-dir", str(mirror), "for-each-ref", "--format=%(refname)", KEPT).split()
    assert kept.startswith(f"{KEPT}{checkout.branch}/")
    assert git("--git-dir", str(mirror), "rev-parse", kept) == head
    git("--git-dir", str(mirror), "fetch", "--prune", "--quiet", "origin")
    assert git("--git-dir", str(mirror), "rev-parse", kept) == head, "a fetch --prune keeps it"
    assert (sweep.removed_total, sweep.freed_total) == (2, done.freed_bytes)
    assert sweep.last is done

    again = await sweep.run_once(CUTOFF)
    assert (again.removed, again.busy, again.kept_refs_pruned) == (1, 0, 0), "the held one, once let go"


async def test_kept_refs_go_one_retention_period_after_their_checkout(
    engine, cache: RepoCache, source: RepoSource, origin, tmp_path: Path
) -> None:
    mirror = await cache.mirror(source)
    old_stamp = (OLD.astimezone(UTC)).strftime(STAMP)
    new_stamp = (NOW.astimezone(UTC)).strftime(STAMP)
    for ref in (f"{KEPT}a2a/aaaaaaaa/{old_stamp}", f"{KEPT}a2a/bbbbbbbb/{new_stamp}"):
        git("--git-dir", str(mirror), "update-ref", ref, origin.main)
    done = await sweep_of(tmp_path / "ws", cache, engine).run_once(CUTOFF)
    assert done.kept_refs_pruned == 1
    left = git("--git-dir", str(mirror), "for-each-ref", "--format=%(refname)", KEPT).split()
    assert left == [f"{KEPT}a2a/bbbbbbbb/{new_stamp}"]
    assert git("--git-dir", str(mirror), "rev-parse", "refs/heads/main") == origin.main


async def test_a_run_waits_for_a_removal_in_progress_then_marks_its_workspace_again(tmp_path: Path) -> None:
    path = tmp_path / "ws" / principal_key("alice") / "ctx"
    path.mkdir(parents=True)
    async with in_use(path, "alice", "ctx"):
        pass
    mark = path.parent / MARKS / "ctx.json"
    fd = await _locked(mark, fcntl.LOCK_EX, wait=False)
    assert fd is not None
    entered = asyncio.Event()

    async def run() -> None:
        async with in_use(path, "alice", "ctx"):
            entered.set()
            assert await _locked(mark, fcntl.LOCK_EX, wait=False) is None, "a sweep cannot take it now"

    task = asyncio.create_task(run())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not entered.is_set(), "the run waits while the sweep holds the mark"
    mark.unlink()
    os.close(fd)
    await asyncio.wait_for(task, 30)
    assert json.loads(mark.read_text()) == {"owner": "alice", "contextId": "ctx"}


async def test_the_store_tells_open_tasks_and_the_last_status_of_a_context_and_a_role_only_its_own(
    engine,
) -> None:
    await fill(engine, 2, Spec(owner="alice", at=OLD, contexts=1, tag="c", role="coder"))
    await fill(
        engine, 1, Spec(owner="alice", at=NOW, contexts=1, tag="c", role="coder", state=TaskState.WORKING)
    )
    await fill(
        engine, 1, Spec(owner="alice", at=NOW + timedelta(seconds=5), contexts=1, tag="c", role="other")
    )
    pruning = Pruning(engine)
    keys = [("alice", "c-ctx-0"), ("bob", "c-ctx-0"), ("alice", "none")]
    (everyone,) = (await pruning.contexts(keys)).items()
    assert everyone[0] == ("alice", "c-ctx-0") and everyone[1][0] == 1
    (coder,) = (await pruning.contexts(keys, role="coder")).values()
    assert coder[0] == 1 and coder[1] < everyone[1][1], "the other role's later status is not the coder's"
    assert await pruning.contexts(keys, role="nobody") == {}
    assert await pruning.contexts([]) == {}


async def test_a_python_workspace_agents_folder_is_marked_and_swept_as_a_cli_runs(
    engine, origin, tmp_path: Path
) -> None:
    from tests.agents.repos.test_workspace import CONTEXT, loaded, message, options, run

    opts = options(tmp_path, origin)
    ran = await run(loaded(opts), message("EDIT", origin.url))
    assert ran.ctx.workspace is not None and ran.ctx.workspace.is_dir()
    folder = ran.ctx.workspace
    mark = folder.parent / MARKS / f"{folder.name}.json"
    assert json.loads(mark.read_text()) == {"owner": "alice", "contextId": CONTEXT}
    cache = RepoCache(Path(opts.repo_cache_root), timeout_s=60)
    done = await sweep_of(Path(opts.workspace_root), cache, engine).run_once(CUTOFF)
    assert done.removed == 1 and done.kept_refs == 1, "no task of its context in the store"
    assert not folder.exists() and not mark.exists()


async def test_a_mark_left_without_its_folder_goes_unless_a_run_holds_it(
    engine, cache: RepoCache, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    never = root / principal_key("alice") / "refused"
    async with in_use(never, "alice", "refused"):
        pass  # its repository was refused: the folder was never made
    held = root / principal_key("alice") / "starting"
    marks = root / principal_key("alice") / MARKS
    async with in_use(held, "alice", "starting"):
        await sweep_of(root, cache, engine).run_once(CUTOFF)
        assert sorted(p.name for p in marks.iterdir()) == ["starting.json"]
    await sweep_of(root, cache, engine).run_once(None)
    assert list(marks.iterdir()) == []


async def test_a_checkout_claiming_another_source_is_kept_in_the_recorded_ones_mirror_and_its_ledger_goes(
    engine, cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    """The checkout's `.git/config` is the agent's: the sweep keeps the work where the server's ledger (out of
    the jail) says the context's repository is, never in a mirror the agent names, and removes the ledger."""
    other_bare = tmp_path / "other.git"
    git("clone", "--quiet", "--bare", str(source.url.removeprefix("file://")), str(other_bare))
    other = RepoSource(f"file://{other_bare}")
    await cache.mirror(other)
    root = tmp_path / "ws"
    await fill(engine, 1, Spec(owner="alice", at=OLD, contexts=1, tag="old"))
    path = root / principal_key("alice") / "old-ctx-0"
    await cache.checkout(source, path, "a2a/01234567")
    ledger = root / principal_key("alice") / LEDGERS / "old-ctx-0.json"
    ledger.parent.mkdir(parents=True)
    ledger.write_text(json.dumps({"url": source.url, "ref": None}))
    async with in_use(path, "alice", "old-ctx-0"):
        (path / "agent.txt").write_text("the agent's work\n")
        head = commit_all(path, "agent's work")
        git("config", "a2a.source", other.url, cwd=path)

    done = await sweep_of(root, cache, engine).run_once(CUTOFF)

    assert (done.removed, done.kept_refs) == (1, 1)
    assert not path.exists() and not ledger.exists()
    refs = "--format=%(refname)"
    assert git("--git-dir", str(cache.path(other)), "for-each-ref", refs, KEPT) == ""
    (kept,) = git("--git-dir", str(cache.path(source)), "for-each-ref", refs, KEPT).split()
    assert git("--git-dir", str(cache.path(source)), "rev-parse", kept) == head
