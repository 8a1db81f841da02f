"""The AgentEvent layer on the agent API, row by row: events in, A2A events out (no server needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.agents.emissions import response_artifact_id
from app.agents.events import AgentEvent, AgentRun, EventAgent
from app.agents.sdk import Request, TaskContext
from app.protocol.events import ArtifactUpdate, Event, StatusUpdate
from app.protocol.model import Message, Part, Role, TaskState


class _Run(AgentRun):
    def __init__(self, request: Request, events: list[AgentEvent]) -> None:
        super().__init__(request)
        self._events = events
        self.answers: list[str] = []

    async def events(self) -> AsyncIterator[AgentEvent]:
        for ev in self._events:
            yield ev
            if ev.kind == "approval_required":
                self.answers.append((await self.wait_answer()).text())


class _Agent(EventAgent):
    def __init__(self, events: list[AgentEvent]) -> None:
        self.events = events
        self.last: _Run | None = None

    def start(self, request: Request) -> AgentRun:
        self.last = _Run(request, self.events)
        return self.last


async def run(events: list[AgentEvent], answer: str | None = None) -> list[Event]:
    out: list[Event] = []
    message = Message("m-1", Role.USER, [Part(text="hi")], context_id="ctx-1", task_id="task-1")
    ctx: TaskContext

    async def emit(batch: list[Event]) -> None:
        out.extend(batch)
        last = batch[-1]
        if isinstance(last, StatusUpdate) and last.status.state is TaskState.INPUT_REQUIRED:
            ctx.deliver(Message("m-2", Role.USER, [Part(text=answer or "")]))

    ctx = TaskContext(Request(message, "ctx-1", "alice"), "task-1", emit)
    await _Agent(events).run(ctx)
    return out


async def test_init_is_a_working_status_carrying_the_session_never_an_artifact():
    """Frameworks show a task's artifacts as its answer: the run's bookkeeping stays in metadata."""
    events = await run([AgentEvent.init(model="opus", session_id="s-1"), AgentEvent.done()])
    first = events[0]
    assert isinstance(first, StatusUpdate) and first.status.state is TaskState.WORKING
    assert first.metadata == {"session": {"model": "opus", "sessionId": "s-1"}}
    assert first.status.message is None
    assert not any(isinstance(e, ArtifactUpdate) for e in events)
    first = (await run([AgentEvent.init(), AgentEvent.done()]))[0]
    assert isinstance(first, StatusUpdate) and first.status.state is TaskState.WORKING


async def test_thinking_chunks_share_one_artifact_and_append_after_the_first():
    first, second, closing, done = await run(
        [AgentEvent.thinking("a"), AgentEvent.thinking("b"), AgentEvent.done()]
    )
    assert isinstance(first, ArtifactUpdate) and isinstance(second, ArtifactUpdate)
    assert first.artifact.artifact_id == second.artifact.artifact_id == response_artifact_id("task-1")
    assert first.artifact.name == "assistant-response"
    assert (first.append, second.append) == (False, True)
    assert first.artifact.parts[0].text == "a" and second.artifact.parts[0].text == "b"
    assert (
        closing.last_chunk and closing.append and closing.artifact.artifact_id == first.artifact.artifact_id
    )
    assert done.status.state is TaskState.COMPLETED and done.final
    assert response_artifact_id("task-1") != response_artifact_id("task-2")


async def test_tool_use_and_tool_result():
    use, res, short, _ = await run(
        [
            AgentEvent.tool_use("Bash", {"cmd": "ls"}),
            AgentEvent.tool_result("y" * 500),
            AgentEvent.tool_result("ok"),
            AgentEvent.done(),
        ]
    )
    assert use.status.state is TaskState.WORKING
    assert use.status.message.parts[0].text == "Using tool: Bash"
    text = res.status.message.parts[0].text
    assert res.status.state is TaskState.WORKING and len(text) == 200 and text.startswith("yyy")
    assert short.status.message.parts[0].text == "ok"


async def test_approval_required_asks_and_hands_the_answer_to_the_run():
    agent_events = [AgentEvent.approval_required("Run rm?"), AgentEvent.done()]
    ask, done = await run(agent_events, answer="yes")
    assert ask.status.state is TaskState.INPUT_REQUIRED and ask.final is False
    assert ask.status.message.parts[0].text == "Run rm?"
    assert done.status.state is TaskState.COMPLETED


async def test_done_is_completed_final_with_result_artifact():
    *_, result, status = await run([AgentEvent.done(summary="fixed", stats={"turns": 3})])
    assert result.artifact.name == "result" and result.last_chunk
    assert result.artifact.parts[0].data == {"summary": "fixed", "stats": {"turns": 3}}
    assert status.status.state is TaskState.COMPLETED and status.final is True


async def test_done_without_output_is_just_completed():
    (status,) = await run([AgentEvent.done()])
    assert status.status.state is TaskState.COMPLETED and status.final


@pytest.mark.parametrize(
    "events", [[AgentEvent.error("boom")], [AgentEvent.error("boom"), AgentEvent.done()]]
)
async def test_error_is_failed_final_with_text_and_nothing_after(events):
    (ev,) = await run(events)
    assert ev.status.state is TaskState.FAILED and ev.final
    assert ev.status.message.parts[0].text == "boom"


async def test_a_stream_that_ends_without_result_fails():
    (ev,) = await run([])
    assert ev.status.state is TaskState.FAILED
    assert "without reporting a result" in ev.status.message.parts[0].text


async def test_an_artifact_event_is_a_whole_artifact_of_its_id_before_the_end():
    """A turn's change (a CLI run's checkout): one artifact update per event, its id kept, so the same id
    again replaces it."""
    diff = Part(raw=b"diff --git a/x b/x\n", media_type="text/x-diff", filename="changes.diff")
    events = await run([AgentEvent.artifact([diff], "task-1-diff", "changes.diff"), AgentEvent.done()])
    update, end = events
    assert isinstance(update, ArtifactUpdate) and update.last_chunk and not update.append
    assert (update.artifact.artifact_id, update.artifact.name) == ("task-1-diff", "changes.diff")
    assert update.artifact.parts == [diff]
    assert isinstance(end, StatusUpdate) and end.status.state is TaskState.COMPLETED
