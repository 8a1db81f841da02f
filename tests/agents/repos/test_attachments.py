"""The client's files under the workspace's attachments/: one bad part refuses them all, with nothing
written; links the agent left are never written through."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app.agents.repos.attachments import write_attachments
from app.agents.repos.cache import RepoCache
from app.agents.repos.changes import collect
from app.agents.repos.errors import RepoError
from app.agents.repos.source import RepoSource

from .conftest import tree_of

EACH = 1000
TOTAL = 1500
GOOD = ("data/report.csv", b"a,b\n1,2\n")


def write(ws: Path, *files: tuple[str, bytes]) -> list[Path]:
    return write_attachments(ws, files, EACH, TOTAL)


def test_good_parts_are_written_under_attachments(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    paths = write(ws, GOOD, ("notes.txt", b"hello"), ("./a//b/c.bin", b"\0\1"))
    assert paths == [
        ws / "attachments" / "data" / "report.csv",
        ws / "attachments" / "notes.txt",
        ws / "attachments/a/b/c.bin",
    ]
    assert tree_of(ws) == {
        "attachments/data/report.csv": (b"a,b\n1,2\n", False),
        "attachments/notes.txt": (b"hello", False),
        "attachments/a/b/c.bin": (b"\0\1", False),
    }
    write(ws, ("notes.txt", b"again"))
    assert (ws / "attachments" / "notes.txt").read_bytes() == b"again", "a later message's file replaces it"
    assert sorted(os.listdir(ws / "attachments")) == ["a", "data", "notes.txt"], "no temporary file left"


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("../x", b"x", "'..'"),
        ("a/../../x", b"x", "'..'"),
        ("/etc/x", b"x", "absolute path"),
        ("", b"x", "no name"),
        ("  ", b"x", "no name"),
        ("a\0b", b"x", "control character"),
        ("..\\x", b"x", "backslash"),
        ("a/.git/config", b"x", "'.git'"),
        ("./", b"x", "names no file"),
        ("big.bin", b"x" * (EACH + 1), f"{EACH + 1} bytes, over the limit of {EACH}"),
        ("n" * 256, b"x", "longer than 255 bytes"),
    ],
)
def test_a_bad_part_refuses_all_and_writes_nothing(tmp_path: Path, name: str, data: bytes, why: str) -> None:
    ws = tmp_path / "ws"
    with pytest.raises(RepoError, match=re.escape(why)) as refused:
        write(ws, GOOD, (name, data))
    assert repr(name)[:40] in str(refused.value) or not name.strip()
    assert not ws.exists(), "nothing written, not even the good part"


def test_the_total_and_the_same_name_twice_are_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with pytest.raises(RepoError, match=r"'c' takes the message's files over the limit of 1500 bytes"):
        write(ws, ("a", b"x" * 700), ("b", b"x" * 700), ("c", b"x" * 200))
    with pytest.raises(RepoError, match=r"'\./a' is named twice"):
        write(ws, ("a", b"1"), ("./a", b"2"))
    with pytest.raises(RepoError, match="a file and a folder"):
        write(ws, ("a", b"1"), ("a/b", b"2"))
    assert not ws.exists()


def test_links_the_agent_left_are_never_written_through(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("the server's\n")
    (ws / "attachments").mkdir(parents=True)
    os.symlink(outside, ws / "attachments" / "out")
    os.symlink(outside / "victim.txt", ws / "attachments" / "victim.txt")
    for name in ("out/x.txt", "victim.txt"):
        with pytest.raises(RepoError, match="is a link"):
            write(ws, GOOD, (name, b"overwritten"))
    assert (outside / "victim.txt").read_text() == "the server's\n" and os.listdir(outside) == ["victim.txt"]
    assert sorted(os.listdir(ws / "attachments")) == ["out", "victim.txt"], (
        "the good part was not written either"
    )
    os.unlink(ws / "attachments" / "out")
    os.unlink(ws / "attachments" / "victim.txt")
    os.rmdir(ws / "attachments")
    os.symlink(outside, ws / "attachments")  # the folder itself a link
    with pytest.raises(RepoError, match="is a link"):
        write(ws, GOOD)
    assert os.listdir(outside) == ["victim.txt"]


def test_a_file_or_folder_in_the_way_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "attachments" / "dir").mkdir(parents=True)
    (ws / "attachments" / "file").write_text("")
    with pytest.raises(RepoError, match="is a file where a folder must be"):
        write(ws, ("file/x", b"1"))
    with pytest.raises(RepoError, match="is there already and is not a file"):
        write(ws, ("dir", b"1"))


def test_a_hard_link_the_agent_left_is_replaced_not_written_through(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "attachments").mkdir(parents=True)
    (tmp_path / "victim.txt").write_text("the server's\n")
    os.link(tmp_path / "victim.txt", ws / "attachments" / "notes.txt")
    write(ws, ("notes.txt", b"new"))
    assert (tmp_path / "victim.txt").read_text() == "the server's\n"
    assert (ws / "attachments" / "notes.txt").read_bytes() == b"new"


async def test_attachments_are_no_part_of_the_tasks_change(
    cache: RepoCache, source: RepoSource, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", "a2a/0123abcd")
    write(co.path, GOOD)
    (co.path / "README.md").write_text("changed\n")
    changes = await collect(co, None, "x", 1 << 20)
    assert [f.path for f in changes.task.files] == ["README.md"]
