"""The JSON forms of a run's calls (`calls.py`) between a remote worker and the server, both ways, in one
place: the server's worker endpoint (`api/endpoints/worker_calls.py`) encodes what `LocalCalls` returns, the
worker's `RemoteCalls` (`runner/remote_calls.py`) decodes it, so the two are read and changed together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.protocol.model import Part

from .calls import AgentInfo, ChildTask

OPS = ("list_agents", "send_to_agent", "get_task", "answer_task", "cancel_task")
"""The calls a worker's run may make (`POST /workers/v1/tasks/{id}/calls` `{op, args}`)."""


def child_to_wire(child: ChildTask) -> dict[str, Any]:
    return {
        "taskId": child.task_id,
        "contextId": child.context_id,
        "role": child.role,
        "state": child.state,
        "text": child.text,
        "usage": child.usage,
        "artifacts": list(child.artifacts),
    }


def child_from_wire(d: Mapping[str, Any]) -> ChildTask:
    return ChildTask(
        task_id=d["taskId"],
        context_id=d["contextId"],
        role=d["role"],
        state=d["state"],
        text=d["text"],
        usage=d.get("usage"),
        artifacts=tuple(d.get("artifacts") or ()),
    )


def agents_to_wire(agents: Sequence[AgentInfo]) -> list[dict[str, Any]]:
    return [
        {
            "role": a.role,
            "name": a.name,
            "description": a.description,
            "skills": list(a.skills),
            "available": a.available,
        }
        for a in agents
    ]


def agents_from_wire(items: Sequence[Mapping[str, Any]]) -> list[AgentInfo]:
    return [
        AgentInfo(
            role=d["role"],
            name=d["name"],
            description=d["description"],
            skills=tuple(d.get("skills") or ()),
            available=bool(d["available"]),
        )
        for d in items
    ]


def files_to_wire(files: Sequence[Part]) -> list[dict[str, Any]]:
    return [p.to_store() for p in files]
