"""The server's scratch folders (`app/agents/jail/scratch.py`): each names the process that made it, and the
sweep removes those whose process is gone and keeps every folder it cannot be sure of. Each test sweeps a
`tmp_path` of its own, never the host's temporary folder."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.agents.cli.ndjson import NdjsonAgent
from app.agents.jail import scratch
from app.agents.options import AgentOptions

ROOT = Path(__file__).resolve().parents[2]
MAKE = "import sys; from app.agents.jail import scratch; print(scratch.make('a2a-tools-', sys.argv[1]))"


def me() -> scratch.Owner:
    owner = scratch._me()
    assert owner is not None, "this test needs /proc"
    return owner


def made_by_a_child(root: Path, reap: bool = True) -> tuple[Path, subprocess.Popen[str]]:
    """A folder a child process made, the child exited (and reaped, unless `reap` is false)."""
    child = subprocess.Popen(
        [sys.executable, "-c", MAKE, str(root)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    folder = Path(child.stdout.readline().strip())
    child.stdout.close()
    if reap:
        assert child.wait(30) == 0
    return folder, child


def recorded(root: Path, name: str, record: object) -> Path:
    folder = root / name
    folder.mkdir(mode=0o700)
    (folder / scratch.RECORD).write_text(json.dumps(record))
    return folder


def test_the_record_is_there_when_make_returns(tmp_path: Path) -> None:
    folder = scratch.make("a2a-egress-", tmp_path)
    assert folder.parent == tmp_path and folder.name.startswith("a2a-egress-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert scratch.read_owner(folder) == me()
    assert sorted(p.name for p in folder.iterdir()) == [scratch.RECORD], "no partial record left"
    scratch.remove(folder)
    assert not folder.exists()


def test_make_refuses_an_unknown_prefix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a scratch prefix"):
        scratch.make("a2a-other-", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_dead_owners_folder_is_removed(tmp_path: Path) -> None:
    folder, child = made_by_a_child(tmp_path)
    (folder / "proxy.sock").write_text("")  # what it held goes with it
    owner = scratch.read_owner(folder)
    assert owner is not None and owner.pid == child.pid and owner.pidns == me().pidns
    assert scratch.sweep(tmp_path) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_zombie_owner_is_dead(tmp_path: Path) -> None:
    folder, child = made_by_a_child(tmp_path, reap=False)
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped: a zombie
        assert scratch.sweep(tmp_path) == 1
        assert not folder.exists()
    finally:
        child.wait(30)


def test_a_live_owners_folder_is_kept(tmp_path: Path) -> None:
    folder = scratch.make("a2a-tools-", tmp_path)
    assert scratch.sweep(tmp_path) == 0
    assert (folder / scratch.RECORD).is_file()


def test_a_reused_pid_with_another_start_time_is_not_the_owner(tmp_path: Path) -> None:
    mine = me()
    folder = recorded(tmp_path, "a2a-tools-reused", {**mine._asdict(), "start": mine.start - 1})
    assert scratch.sweep(tmp_path) == 1
    assert not folder.exists()


@pytest.mark.parametrize(
    "record",
    [
        None,
        "{not json",
        ["a", "list"],
        {"pid": 1},
        {"pid": "1", "start": 1, "pidns": "pid:[1]"},
        {"pid": True, "start": 1, "pidns": "pid:[1]"},
        {"pid": 0, "start": 1, "pidns": "pid:[1]"},
        {"pid": 1, "start": 1, "pidns": ""},
    ],
    ids=["none", "not-json", "a-list", "no-start", "pid-a-string", "pid-a-bool", "pid-zero", "no-pidns"],
)
def test_a_folder_without_a_readable_record_is_kept(tmp_path: Path, record: object) -> None:
    folder = tmp_path / "a2a-egress-unknown"
    folder.mkdir()
    if isinstance(record, str):
        (folder / scratch.RECORD).write_text(record)
    elif record is not None:
        (folder / scratch.RECORD).write_text(json.dumps(record))
    assert scratch.sweep(tmp_path) == 0
    assert folder.is_dir()


def test_a_symlink_to_a_dead_owners_folder_is_kept_and_so_is_its_target(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target, _ = made_by_a_child(elsewhere)
    link = tmp_path / "a2a-tools-link"
    link.symlink_to(target, target_is_directory=True)
    assert scratch.sweep(tmp_path) == 0
    assert link.is_symlink() and (target / scratch.RECORD).is_file()


def test_a_folder_of_another_pid_namespace_is_kept(tmp_path: Path) -> None:
    dead, _ = made_by_a_child(tmp_path)
    owner = scratch.read_owner(dead)
    assert owner is not None
    (dead / scratch.RECORD).write_text(json.dumps({**owner._asdict(), "pidns": "pid:[1]"}))
    assert scratch.sweep(tmp_path) == 0
    assert dead.is_dir()


def test_only_the_scratch_prefixes_are_swept(tmp_path: Path) -> None:
    dead, _ = made_by_a_child(tmp_path)
    other = dead.rename(tmp_path / "a2a-jail-check-x")
    assert scratch.sweep(tmp_path) == 0
    assert other.is_dir()


def test_a_missing_root_sweeps_nothing(tmp_path: Path) -> None:
    assert scratch.sweep(tmp_path / "missing") == 0


async def test_a_failed_sweep_never_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(root: Path | None = None) -> int:
        raise OSError("no temporary folder")

    monkeypatch.setattr(scratch, "sweep", broken)
    agent = NdjsonAgent(AgentOptions(command="true", sandbox="none", network="host"))
    with caplog.at_level(logging.WARNING, logger="app.agents.cli.run"):
        await agent.setup()
    assert "could not sweep" in caplog.text and "no temporary folder" in caplog.text
    await agent.aclose()


def test_a_temporary_folder_too_long_for_a_socket_gives_way_to_tmp(tmp_path: Path, monkeypatch) -> None:
    """A TMPDIR deep in a tree (an xdist worker's test folder) once failed every run with "AF_UNIX path too
    long"; past `LONGEST_ROOT` the folders go to /tmp (where the sweep looks too)."""
    assert scratch.LONGEST_ROOT + len("/a2a-tools-XXXXXXXX/run/tools.sock") <= 107, "the deepest socket fits"
    short = Path("/tmp")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert scratch.base() == (tmp_path if len(str(tmp_path)) <= scratch.LONGEST_ROOT else short)
    deep = tmp_path / ("d" * max(1, scratch.LONGEST_ROOT + 1 - len(str(tmp_path)) - 1))
    deep.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    assert scratch.base() == short
    folder = scratch.make("a2a-tools-")
    try:
        assert folder.parent == short and scratch.read_owner(folder) is not None
    finally:
        scratch.remove(folder)
