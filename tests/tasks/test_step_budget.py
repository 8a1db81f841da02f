"""A step ends a task whose spend passes its budget (`tasks/step.py`, `protocol/budget.py`): pure, so the
replica that writes a task and a remote worker that runs it cut its events at the same report."""

from __future__ import annotations

from app.protocol.events import ArtifactUpdate, StatusUpdate, status_update
from app.protocol.model import Artifact, Part, Task, TaskState, TaskStatus, iso, utcnow
from app.protocol.usage import CHILD_USAGE_KEY, USAGE_KEY, Usage
from app.tasks.step import step


def _task(**metadata: object) -> Task:
    return Task("t1", "c1", TaskStatus(TaskState.WORKING, iso(utcnow())), metadata=dict(metadata))


def _report(cost: float) -> StatusUpdate:
    ev = status_update("t1", "c1", TaskState.WORKING)
    ev.metadata = {USAGE_KEY: Usage.of("m", output_tokens=5, cost_usd=cost).to_wire()}
    return ev


def _chunk() -> ArtifactUpdate:
    return ArtifactUpdate("t1", "c1", Artifact("a1", [Part(text="more")]))


def test_the_report_that_passes_the_budget_fails_the_task_and_nothing_after_it_counts() -> None:
    events = [_report(0.02), _chunk(), _report(0.02), _report(0.02), _chunk(), _report(0.02)]
    s = step(_task(budgetUsd=0.05), 7, events)
    assert s.status.state is TaskState.FAILED
    assert s.status.message is not None
    assert s.status.message.text().startswith(
        "Budget exceeded: this task spent $0.06 against its budget of $0.05"
    )
    assert len(s.usage) == 3 and s.metadata is not None and s.metadata[USAGE_KEY]["costUsd"] == 0.06
    assert len(events) == 5 and events[-1].status.state is TaskState.FAILED  # type: ignore[union-attr]
    assert [r.seq for r in s.records] == [8, 9, 10, 11, 12]


def test_spend_up_to_the_budget_and_a_task_without_one_go_on() -> None:
    assert step(_task(budgetUsd=0.04), 1, [_report(0.02), _report(0.02)]).status.state is TaskState.WORKING
    assert step(_task(), 1, [_report(5.0)]).status.state is TaskState.WORKING


def test_an_ended_childs_spend_counts_against_the_parents_budget() -> None:
    child = status_update("t1", "c1", TaskState.WORKING)
    child.metadata = {CHILD_USAGE_KEY: {"taskId": "k1", USAGE_KEY: {"reports": 2, "costUsd": 0.04}}}
    s = step(_task(budgetUsd=0.05, usage={"reports": 1, "costUsd": 0.02}), 3, [child])
    assert s.status.state is TaskState.FAILED
    assert "spent $0.06 against its budget of $0.05" in (s.status.message.text() if s.status.message else "")


def test_a_report_on_the_final_event_leaves_the_task_as_it_ended() -> None:
    done = _report(0.5)
    done.status = TaskStatus(TaskState.COMPLETED, iso(utcnow()))
    assert step(_task(budgetUsd=0.05), 1, [done]).status.state is TaskState.COMPLETED
