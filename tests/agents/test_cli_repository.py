"""The artifacts of a CLI turn's end (`cli/repository.py` `artifacts`), from a measured change: which are
published, their ids, names and parts, and the summary."""

from __future__ import annotations

from pathlib import Path

from app.agents.cli import repository
from app.agents.cli.repository import FULL_PATCH_MAX_BYTES, artifacts
from app.agents.events import AgentEventKind
from app.agents.repos.cache import Checkout
from app.agents.repos.changes import Changes, Commit, Diff, FileChange, cut
from app.agents.repos.source import RepoSource

BASE, MID, HEAD = "a" * 40, "b" * 40, "c" * 40
CHECKOUT = Checkout(Path("/ws"), RepoSource("/srv/git/app.git", "main"), "a2a/0123abcd", BASE)


def diff(start: str, patch: bytes, limit: int = 1 << 20, files: tuple[FileChange, ...] = ()) -> Diff:
    commits = (Commit(HEAD, "Work of the task", "a2a-server <a2a-server@localhost>"),)
    return Diff(start, HEAD, patch, cut(patch, limit), files, commits)


def test_a_turn_publishes_the_summary_the_branchs_diff_and_its_own() -> None:
    files = (FileChange("src/app.py", "modified", 1, 1), FileChange("logo.png", "added", None, None))
    task = diff(BASE, b"diff --git a/src/app.py b/src/app.py\n...", files=files)
    turn = diff(MID, b"diff --git a/logo.png b/logo.png\n...", files=files[1:])
    events = artifacts("t-1", 2, CHECKOUT, Changes(BASE, HEAD, HEAD, task, turn))
    assert all(e.kind is AgentEventKind.ARTIFACT for e in events)
    assert [(e.artifact_id, e.text) for e in events] == [
        ("t-1-changes", "changes"),
        ("t-1-diff", "changes.diff"),
        ("t-1-turn-2", "turn-2.diff"),
    ]
    summary = events[0].parts[0].data
    assert summary["repository"] == {"url": "/srv/git/app.git", "ref": "main"}
    assert (summary["branch"], summary["base"], summary["head"]) == ("a2a/0123abcd", BASE, HEAD)
    assert summary["files"][1] == {
        "path": "logo.png",
        "status": "added",
        "added": None,
        "deleted": None,
        "binary": True,
    }
    assert summary["commits"] == [
        {"sha": HEAD, "subject": "Work of the task", "author": "a2a-server <a2a-server@localhost>"}
    ]
    assert summary["turn"]["number"] == 2 and summary["turn"]["start"] == MID
    assert [f["path"] for f in summary["turn"]["files"]] == ["logo.png"]
    assert (summary["cut"], summary["fullPatch"]) == (False, True)
    part = events[1].parts[0]
    assert (part.raw, part.media_type, part.filename) == (task.patch, "text/x-diff", "changes.diff")


def test_no_change_publishes_the_summary_alone() -> None:
    empty = diff(BASE, b"")
    events = artifacts("t-1", 1, CHECKOUT, Changes(BASE, BASE, None, empty, empty))
    assert [e.text for e in events] == ["changes"]
    assert events[0].parts[0].data["files"] == []


def test_a_cut_diff_comes_with_the_whole_patch_unless_that_is_too_large(monkeypatch) -> None:
    patch = b"".join(b"+line %d\n" % i for i in range(2000))
    task = diff(BASE, patch, limit=1024)
    events = artifacts("t-1", 1, CHECKOUT, Changes(BASE, HEAD, HEAD, task, task))
    assert [e.text for e in events] == ["changes", "changes.diff", "changes-full.diff", "turn-1.diff"]
    assert events[1].parts[0].raw == task.shown and b"[diff cut:" in task.shown
    assert events[2].parts[0].raw == patch
    monkeypatch.setattr(repository, "FULL_PATCH_MAX_BYTES", len(patch) - 1)
    events = artifacts("t-1", 1, CHECKOUT, Changes(BASE, HEAD, HEAD, task, task))
    assert [e.text for e in events] == ["changes", "changes.diff", "turn-1.diff"]
    assert events[0].parts[0].data["fullPatch"] is False
    assert FULL_PATCH_MAX_BYTES == 16 * 1024 * 1024
