"""The AgentEvent → A2A mapping table, row by row (pure function: no server needed)."""

from __future__ import annotations

from app.agents.base import AgentEvent
from app.protocol.model import ArtifactUpdate, StatusUpdate, TaskState
from app.runner.mapping import EventMapper, response_artifact_id


def mapper() -> EventMapper:
    return EventMapper("task-1", "ctx-1")


def test_init_is_working_plus_session_artifact_when_known():
    m = mapper()
    out = m.map(AgentEvent.init(model="opus", session_id="s-1"))
    assert isinstance(out[0], StatusUpdate) and out[0].status.state is TaskState.WORKING and not out[0].final
    art = out[1]
    assert isinstance(art, ArtifactUpdate)
    assert art.artifact.metadata == {"model": "opus", "sessionId": "s-1"}
    assert art.artifact.parts[0].data == {"model": "opus", "sessionId": "s-1"}
    assert len(m.map(AgentEvent.init())) == 1, "no artifact when nothing is known"


def test_thinking_chunks_share_one_artifact_and_append_after_the_first():
    m = mapper()
    first, second = m.map(AgentEvent.thinking("a"))[0], m.map(AgentEvent.thinking("b"))[0]
    assert isinstance(first, ArtifactUpdate) and isinstance(second, ArtifactUpdate)
    assert first.artifact.artifact_id == second.artifact.artifact_id == response_artifact_id("task-1")
    assert first.artifact.name == "assistant-response"
    assert (first.append, second.append) == (False, True)
    assert first.artifact.parts[0].text == "a" and second.artifact.parts[0].text == "b"
    assert response_artifact_id("task-1") != response_artifact_id("task-2")


def test_tool_use_and_tool_result():
    m = mapper()
    (use,) = m.map(AgentEvent.tool_use("Bash", {"cmd": "ls"}))
    assert use.status.state is TaskState.WORKING
    assert use.status.message.parts[0].text == "Using tool: Bash"
    (res,) = m.map(AgentEvent.tool_result("y" * 500))
    text = res.status.message.parts[0].text
    assert res.status.state is TaskState.WORKING and len(text) == 200 and text.startswith("yyy")
    (short,) = m.map(AgentEvent.tool_result("ok"))
    assert short.status.message.parts[0].text == "ok"


def test_approval_required_is_input_required_not_final():
    (ev,) = mapper().map(AgentEvent.approval_required("Run rm?"))
    assert ev.status.state is TaskState.INPUT_REQUIRED and ev.final is False
    assert ev.status.message.parts[0].text == "Run rm?"


def test_done_is_completed_final_with_result_artifact():
    m = mapper()
    m.map(AgentEvent.thinking("x"))
    out = m.map(AgentEvent.done(summary="fixed", stats={"turns": 3}))
    closing, result, status = out
    assert isinstance(closing, ArtifactUpdate) and closing.last_chunk and closing.append
    assert closing.artifact.artifact_id == response_artifact_id("task-1")
    assert result.artifact.name == "result"
    assert result.artifact.parts[0].data == {"summary": "fixed", "stats": {"turns": 3}}
    assert status.status.state is TaskState.COMPLETED and status.final is True


def test_done_without_output_is_just_completed():
    (status,) = mapper().map(AgentEvent.done())
    assert status.status.state is TaskState.COMPLETED and status.final


def test_error_is_failed_final_with_text():
    (ev,) = mapper().map(AgentEvent.error("boom"))
    assert ev.status.state is TaskState.FAILED and ev.final
    assert ev.status.message.parts[0].text == "boom"
