"""A child's usage rolled up into its parent (agents calling agents), in process (MemoryBus, SQLite): the
run records an ended child's summary through its own events (`TaskContext.record_child`); the step adds it
to the task's `metadata.usage.children` once per child, beside the task's own reports, and writes no usage
row for it, so the principal's sums count the child's reports only where the child recorded them."""

from __future__ import annotations

from sqlalchemy import func, select

from app.agents.sdk import TaskContext, Usage
from app.protocol.model import TaskState
from app.protocol.usage import USAGE_KEY, add_to_summary
from app.store.models import TaskUsageRow
from tests.support.inproc import running, send

CHILD = add_to_summary(None, Usage.of("m", input_tokens=10, output_tokens=5, cost_usd=0.02))


async def test_a_child_is_added_once_and_writes_no_usage_row(tmp_path):
    async def script(task: TaskContext) -> None:
        await task.usage(Usage.of("m", input_tokens=3, output_tokens=1, cost_usd=0.01))
        await task.record_child("child-1", CHILD)
        await task.record_child("child-1", CHILD)  # a second look at the same ended child
        await task.complete("done", usage=Usage.of("m", input_tokens=1))

    async with running(tmp_path, script) as c:
        task = await send(c, "hi")
        assert task.status.state is TaskState.COMPLETED
        usage = task.metadata[USAGE_KEY]  # type: ignore[index]
        assert (usage["reports"], usage["inputTokens"], usage["costUsd"]) == (2, 4, 0.01)
        assert usage["children"] == CHILD
        assert usage["childTasks"] == ["child-1"]
        stored = await c.service.get("alice", task.id)
        assert stored.metadata[USAGE_KEY] == usage  # type: ignore[index]
        async with c.engine.connect() as conn:
            rows = (await conn.execute(select(func.sum(TaskUsageRow.input_tokens)))).scalar()
        assert rows == 4


async def test_two_children_add_up_and_a_grandchild_counts_in_its_parents_summary(tmp_path):
    grandchild = add_to_summary(None, Usage.of("g", input_tokens=100))
    with_grandchild = {**CHILD, "children": grandchild, "childTasks": ["grandchild"]}

    async def script(task: TaskContext) -> None:
        await task.record_child("child-1", CHILD)
        await task.record_child("child-2", with_grandchild)

    async with running(tmp_path, script) as c:
        task = await send(c, "hi")
        usage = task.metadata[USAGE_KEY]  # type: ignore[index]
        assert usage["reports"] == 0
        children = usage["children"]
        assert (children["reports"], children["inputTokens"], children["costUsd"]) == (3, 120, 0.04)
        assert set(children["models"]) == {"m", "g"}
        assert usage["childTasks"] == ["child-1", "child-2"]
