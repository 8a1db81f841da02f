"""The console's list reads a bounded window under a filter no index serves, and its cursor carries the walk
on, on both databases: a match older than the window is found on a later page, never by reading more."""

from __future__ import annotations

import pytest
from sqlalchemy import delete

from app.protocol.model import TaskState
from app.store.browse import Browse, Filters
from app.store.db import create_engine
from app.store.models import TaskRow
from app.store.writer import Writer
from tests.conftest import BACKENDS, migrated_database_url
from tests.support.inproc import OWNER, seeded_write


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_sparse_filter_walks_window_by_window(backend, tmp_path):
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    try:
        for i in range(25):
            write = seeded_write(f"t-{i:02}", TaskState.COMPLETED, "r", 60)
            assert write.new_task is not None
            if i == 0:
                write.new_task["title"] = "the Needle"
            await writer.commit(write)
        browse = Browse(engine, window=10)
        pages, cursor, found = 0, None, []
        while True:
            page = await browse.page(Filters(owner=OWNER, text="needle"), limit=5, cursor=cursor)
            pages += 1
            found += [line.id for line in page.lines]
            cursor = page.next_cursor
            if not cursor:
                break
        assert found == ["t-00"]
        assert pages == 3, "25 rows through a window of 10: three pages, the first two empty with a cursor"

        unfiltered = await browse.page(Filters(owner=OWNER), limit=30)
        assert len(unfiltered.lines) == 25 and unfiltered.next_cursor == ""
        assert (await browse.page(Filters(owner="mallory", text="needle"), limit=5)).lines == []
        everyone = await browse.page(Filters(owner=None, state=TaskState.COMPLETED), limit=5)
        assert len(everyone.lines) == 5 and everyone.next_cursor
    finally:
        await writer.stop()
        await engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_task_deleted_between_its_reads_is_not_found_not_an_error(backend, tmp_path):
    """Retention may delete a task between Browse.task's read of the task and of its role (seen: the admin
    command line's `tasks show` died with NoResultFound while the server pruned): it is simply not found."""
    engine = create_engine(await migrated_database_url(backend, tmp_path))
    writer = Writer(engine)
    writer.start()
    try:
        await writer.commit(seeded_write("t-gone", TaskState.COMPLETED, "r", 60))
        browse = Browse(engine)
        read = browse._repo.get_task

        async def read_then_prune(task_id: str, **kw):
            stored = await read(task_id, **kw)
            async with engine.begin() as conn:
                await conn.execute(delete(TaskRow).where(TaskRow.id == task_id))
            return stored

        browse._repo.get_task = read_then_prune  # type: ignore[method-assign]
        assert await browse.task("t-gone", None) is None
    finally:
        await writer.stop()
        await engine.dispose()


def _child(task_id: str, parent: str | None, owner: str = OWNER) -> object:
    """A task's first rows with `parent` as its parent (what a run's `send_to_agent` stores)."""
    write = seeded_write(task_id, TaskState.COMPLETED, "r", 60)
    assert write.new_task is not None
    write.new_task["parent_task_id"] = parent
    write.new_task["owner"] = owner
    write.new_task["title"] = f"title of {task_id}"
    return write


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_tree_reads_ancestors_and_descendants_of_its_owner_only(backend, tmp_path, monkeypatch):
    """root → a → (a1 → a1x, a2), root → b: from `a` the read finds root above and a1, a1x, a2 below, in
    order; another owner sees nothing; a cap on the tasks below says the tree was cut."""
    engine = create_engine(await migrated_database_url(backend, tmp_path))
    writer = Writer(engine)
    writer.start()
    try:
        for task_id, parent in [
            ("root", None),
            ("a", "root"),
            ("b", "root"),
            ("a1", "a"),
            ("a2", "a"),
            ("a1x", "a1"),
        ]:
            await writer.commit(_child(task_id, parent))  # type: ignore[arg-type]
        # Another principal's task that names `a` as its parent is not in alice's tree.
        await writer.commit(_child("m1", "a", owner="mallory"))  # type: ignore[arg-type]
        browse = Browse(engine)

        tree = await browse.tree("a", OWNER)
        assert tree is not None and not tree.cut
        assert [t.id for t in tree.ancestors] == ["root"]
        assert [(n.line.id, [c.line.id for c in n.children]) for n in tree.children] == [
            ("a1", ["a1x"]),
            ("a2", []),
        ]
        assert tree.children[0].line.parent_task_id == "a"
        assert tree.children[0].line.title == "title of a1"

        leaf = await browse.tree("a1x", None)  # an admin's read
        assert leaf is not None and [t.id for t in leaf.ancestors] == ["root", "a", "a1"]
        assert leaf.children == []
        assert await browse.tree("a", "mallory") is None
        alone = await browse.tree("m1", "mallory")
        assert alone is not None and alone.ancestors == [] and alone.children == []

        monkeypatch.setattr("app.store.browse.TREE_TASKS", 2)
        capped = await browse.tree("root", OWNER)
        assert capped is not None and capped.cut
        assert [n.line.id for n in capped.children] == ["a", "b"]
        monkeypatch.setattr("app.store.browse.TREE_TASKS", 200)
        monkeypatch.setattr("app.store.browse.TREE_LEVELS", 2)
        shallow = await browse.tree("root", OWNER)
        assert shallow is not None and shallow.cut
        assert [c.line.id for c in shallow.children[0].children] == ["a1", "a2"]
    finally:
        await writer.stop()
        await engine.dispose()
