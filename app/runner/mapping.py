"""AgentEvent → A2A events: the one place where agent output becomes status and artifact updates.

| AgentEvent        | A2A events                                                                  |
|-------------------|-----------------------------------------------------------------------------|
| init              | status working; artifact `session` with metadata when model/session known   |
| thinking          | artifact `assistant-response`, one id per task, append after the first chunk |
| tool_use          | status working, message "Using tool: <name>"                                |
| tool_result       | status working, message = output truncated to 200 characters                |
| approval_required | status input-required (not final), message = the question                   |
| done              | last chunk of `assistant-response`; artifact `result` with summary/stats    |
|                   | when present; status completed, final                                       |
| error             | status failed, final, message = the error text                              |
"""

from __future__ import annotations

import uuid

from app.agents.base import AgentEvent, AgentEventKind
from app.protocol.model import (
    Artifact,
    ArtifactUpdate,
    Event,
    Part,
    StatusUpdate,
    TaskState,
    new_id,
)
from app.tasks.service import status_update

TOOL_RESULT_LIMIT = 200
RESPONSE_ARTIFACT = "assistant-response"
RESULT_ARTIFACT = "result"
SESSION_ARTIFACT = "session"


def response_artifact_id(task_id: str) -> str:
    """Stable per task, so a run resumed after a restart keeps appending to the same artifact."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"a2a:{task_id}:{RESPONSE_ARTIFACT}"))


def truncate(text: str, limit: int = TOOL_RESULT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class EventMapper:
    """Maps one task's agent events; remembers whether the response artifact has begun."""

    __slots__ = ("context_id", "response_id", "response_started", "task_id")

    def __init__(self, task_id: str, context_id: str, response_started: bool = False) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.response_id = response_artifact_id(task_id)
        self.response_started = response_started

    def _status(self, state: TaskState, text: str | None = None) -> StatusUpdate:
        return status_update(self.task_id, self.context_id, state, text)

    def _artifact(self, artifact: Artifact, append: bool = False, last_chunk: bool = False) -> ArtifactUpdate:
        return ArtifactUpdate(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=artifact,
            append=append,
            last_chunk=last_chunk,
        )

    def map(self, ev: AgentEvent) -> list[Event]:
        kind = ev.kind
        if kind is AgentEventKind.THINKING:
            append = self.response_started
            self.response_started = True
            art = Artifact(
                artifact_id=self.response_id,
                parts=[Part(text=ev.text)],
                name=None if append else RESPONSE_ARTIFACT,
            )
            return [self._artifact(art, append=append)]
        if kind is AgentEventKind.INIT:
            out: list[Event] = [self._status(TaskState.WORKING)]
            info = {k: v for k, v in (("model", ev.model), ("sessionId", ev.session_id)) if v}
            if info:
                art = Artifact(
                    artifact_id=new_id(),
                    parts=[Part(data=info)],
                    name=SESSION_ARTIFACT,
                    metadata=info,
                )
                out.append(self._artifact(art, last_chunk=True))
            return out
        if kind is AgentEventKind.TOOL_USE:
            return [self._status(TaskState.WORKING, f"Using tool: {ev.tool_name}")]
        if kind is AgentEventKind.TOOL_RESULT:
            return [self._status(TaskState.WORKING, truncate(ev.text))]
        if kind is AgentEventKind.APPROVAL_REQUIRED:
            return [self._status(TaskState.INPUT_REQUIRED, ev.text)]
        if kind is AgentEventKind.ERROR:
            return [self._status(TaskState.FAILED, ev.text or "The agent reported an error")]
        out = []
        if self.response_started:
            closing = Artifact(artifact_id=self.response_id, parts=[Part(text="")])
            out.append(self._artifact(closing, append=True, last_chunk=True))
        if ev.summary is not None or ev.stats:
            data = {"summary": ev.summary, "stats": ev.stats or {}}
            art = Artifact(artifact_id=new_id(), parts=[Part(data=data)], name=RESULT_ARTIFACT)
            out.append(self._artifact(art, last_chunk=True))
        out.append(self._status(TaskState.COMPLETED))
        return out

    def status_working(self) -> StatusUpdate:
        """The working status for a run that starts without an init event."""
        return self._status(TaskState.WORKING)

    def map_batch(self, events: list[AgentEvent]) -> list[Event]:
        """Map events that arrived together, for one commit. Nothing after `done`/`error` counts.

        When the response's last chunk and `done` arrive together, that chunk carries `lastChunk`
        itself instead of an empty closing chunk following it.
        """
        out: list[Event] = []
        for ev in events:
            mapped = self.map(ev)
            if (
                ev.kind is AgentEventKind.DONE
                and out
                and _is_chunk_of(out[-1], self.response_id)
                and mapped
                and _is_chunk_of(mapped[0], self.response_id)
            ):
                out[-1].last_chunk = True  # type: ignore[union-attr]
                mapped = mapped[1:]
            out.extend(mapped)
            if ev.kind in (AgentEventKind.DONE, AgentEventKind.ERROR):
                break
        return out


def _is_chunk_of(ev: Event, artifact_id: str) -> bool:
    return isinstance(ev, ArtifactUpdate) and ev.artifact.artifact_id == artifact_id
