"""What the SSE clients of the cluster tests and the soak share: the ended states, the v1.0 header, and a
v1.0 stream result read in the v0.3 shape (`v10_as_v03`), so one set of checks reads both versions."""

from __future__ import annotations

from typing import Any

ENDED = ("completed", "failed", "canceled", "rejected")

V10 = {"A2A-Version": "1.0"}


def v10_as_v03(result: dict[str, Any]) -> dict[str, Any]:
    """A v1.0 stream result (`{"task"|"statusUpdate"|"artifactUpdate": ...}`, `TASK_STATE_*` names) in the
    v0.3 shape the checks read: `kind`, lower-case `status.state`, `final` on a status that ends the
    stream."""
    ((field_name, body),) = result.items()
    kind = {"task": "task", "statusUpdate": "status-update", "artifactUpdate": "artifact-update"}[field_name]
    out = {**body, "kind": kind}
    if "status" in body:
        state = body["status"]["state"].removeprefix("TASK_STATE_").lower().replace("_", "-")
        out["status"] = {**body["status"], "state": state}
        if kind == "status-update":
            out["final"] = state in (*ENDED, "input-required", "auth-required")
    return out
