"""What the drivers of the frameworks on a2a-sdk 0.3 share (`strands_driver.py`, `beeai_driver.py`): JSON
lines on the real stdout (anything else a framework prints goes to stderr: imported first, before them), a
record of every request the framework's httpx clients send, one A2A event described, a bounded call.

Run in the a2a03 venv; the driver's folder is on `sys.path` (the script's own), so drivers `import _a2a03`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

TURN_TIMEOUT_S = 30
"""Longest one framework call may take: a hang is a JSON error line, never a stuck test."""

# JSON lines go to the real stdout; whatever else prints (a framework's logger, warnings) goes to stderr.
_OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import httpx  # noqa: E402
from a2a.types import Message, TaskArtifactUpdateEvent, TaskStatusUpdateEvent  # noqa: E402


def emit(**fields: Any) -> None:
    _OUT.write(json.dumps(fields, default=str) + "\n")


# ---- the wire: every request the framework's httpx clients send -----------------------------------------

WIRE: list[dict[str, Any]] = []
_send = httpx.AsyncClient.send


async def _recording_send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
    entry: dict[str, Any] = {"http": request.method, "url": str(request.url)}
    if request.method == "POST":
        try:
            body = json.loads(request.content)
        except ValueError:
            body = {}
        entry["rpc"] = body.get("method")
        msg = (body.get("params") or {}).get("message") or {}
        entry["task_id"] = msg.get("taskId")
        entry["context_id"] = msg.get("contextId")
        entry["reference_task_ids"] = msg.get("referenceTaskIds")
    WIRE.append(entry)
    return await _send(self, request, **kwargs)


httpx.AsyncClient.send = _recording_send  # type: ignore[method-assign]


# ---- what the framework showed ----------------------------------------------------------------------------


def text_of(parts: Any) -> str:
    return "".join(getattr(p.root, "text", "") for p in parts or [])


def describe(event: Any) -> dict[str, Any]:
    """One A2A event as a2a-sdk 0.3's client yields it: a `Message`, or `(Task, update or None)`."""
    if isinstance(event, Message):
        return {"kind": "message", "text": text_of(event.parts), "task_id": event.task_id}
    task, update = event
    out: dict[str, Any] = {"task_id": task.id, "context_id": task.context_id}
    if update is None:
        out.update(kind="task", state=task.status.state.value)
    elif isinstance(update, TaskStatusUpdateEvent):
        out.update(kind="status-update", state=update.status.state.value, final=update.final)
        if update.status.message:
            out["text"] = text_of(update.status.message.parts)
    elif isinstance(update, TaskArtifactUpdateEvent):
        out.update(
            kind="artifact-update",
            name=update.artifact.name,
            text=text_of(update.artifact.parts),
            append=update.append,
            last_chunk=update.last_chunk,
        )
    return out


async def timed_turn(
    text: str, turn: Awaitable[Any], events: list[dict[str, Any]], **shown: Any
) -> tuple[dict[str, Any], Any]:
    """One turn of the framework, bounded: what it showed (`events`, filled as it ran), what went on the
    wire, how long it took, the error it raised; and what the call returned (None when it failed)."""
    wire_from = len(WIRE)
    started = time.monotonic()
    out: dict[str, Any] = {"sent": text, **shown}
    returned = None
    try:
        returned = await asyncio.wait_for(turn, TURN_TIMEOUT_S)
    except TimeoutError:
        out["error"] = f"timeout: the turn did not end within {TURN_TIMEOUT_S} s"
    except Exception as exc:  # what the framework raised is what the user saw
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - started, 3)
    out["events"] = events
    out["wire"] = [w for w in WIRE[wire_from:] if w["http"] == "POST"]
    out["task_ids"] = sorted({e["task_id"] for e in events if e.get("task_id")})
    out["context_ids"] = sorted({e["context_id"] for e in events if e.get("context_id")})
    return out, returned


async def bounded(what: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(what, TURN_TIMEOUT_S)


Scenario = Callable[[str, str], Awaitable[dict[str, Any]]]
"""A scenario: (the server's URL, the mode) → what the framework showed."""


def main(scenarios: dict[str, Scenario]) -> None:
    """Run the scenarios asked for (all by default) in each mode asked for (both by default), one JSON line
    each; a scenario that raises or times out is a line with its `error`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", action="append", choices=["streaming", "blocking"])
    parser.add_argument("--scenario", action="append", choices=list(scenarios))
    args = parser.parse_args()

    async def run() -> None:
        for mode in args.mode or ["streaming", "blocking"]:
            for name in args.scenario or list(scenarios):
                try:
                    emit(mode=mode, scenario=name, **await scenarios[name](args.url, mode))
                except TimeoutError:
                    emit(mode=mode, scenario=name, error=f"timeout: no answer within {TURN_TIMEOUT_S} s")
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    emit(mode=mode, scenario=name, error=error, trace=traceback.format_exc())

    asyncio.run(run())
