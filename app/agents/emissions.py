"""What a `TaskContext`'s events carry that its agent does not write itself: the response artifact's stable
id, a tool call's metadata, and the run's usage report filled in and priced (`UsageMeter`).

Internals of the agent API: agents import `app.agents.sdk`, which re-exports `RESPONSE_ARTIFACT`; the
runner and the tests import the rest from here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from app.protocol.events import Event
from app.protocol.model import name_id
from app.protocol.usage import Usage

RESPONSE_ARTIFACT = "assistant-response"
"""The name of the artifact `TaskContext.say` streams text into (one per task, with a stable id)."""
TOOL_CALL_KEY = "toolCall"
"""The key of a tool call in the metadata of the status message announcing it (`TaskContext.tool_call`)."""
TOOL_INPUT_LIMIT = 2000
"""Longest a tool call's input is shown (its JSON, in characters); a longer one is cut, as a string."""

Emit = Callable[[list[Event]], Awaitable[None]]
Price = Callable[[Usage], Usage]


@functools.lru_cache(maxsize=1024)
def response_artifact_id(task_id: str) -> str:
    """Stable per task, so a run resumed after a restart keeps appending to the same artifact (cached: a
    streaming agent asks for it at every chunk)."""
    return name_id(uuid.NAMESPACE_URL, f"a2a:{task_id}:{RESPONSE_ARTIFACT}")


def tool_call_metadata(name: str, tool_input: Any) -> dict[str, Any]:
    """`{"toolCall": {"name", "input"}}`; an input whose JSON is over `TOOL_INPUT_LIMIT` characters is that
    JSON cut to the limit (a string), with `"truncated": true`."""
    call: dict[str, Any] = {"name": name}
    if tool_input is not None:
        try:
            shown = json.dumps(tool_input, ensure_ascii=False, default=str, allow_nan=False)
        except ValueError:  # NaN or a cycle: not JSON the store takes; its text instead
            shown = json.dumps(str(tool_input), ensure_ascii=False)
        if len(shown) > TOOL_INPUT_LIMIT:
            call["input"] = shown[: TOOL_INPUT_LIMIT - 1] + "…"
            call["truncated"] = True
        else:
            call["input"] = json.loads(shown)
    return {TOOL_CALL_KEY: call}


class UsageMeter:
    """What a run used between two usage reports that the agent may leave out of them: the wall time less
    the waits for the user's answers, and the tool calls announced; and the server's prices."""

    __slots__ = ("_price", "_since", "_tools", "_waited")

    def __init__(self, price: Price | None = None) -> None:
        self._price = price
        """Fills in the cost of a report's tokens from the server's price table."""
        self._since = time.monotonic()
        self._waited = 0.0
        """Seconds spent waiting for the user's answers since `_since` (not wall time of the run)."""
        self._tools = 0
        """Tool calls announced since the last usage report."""

    def tool_called(self) -> None:
        self._tools += 1

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The time inside is the user's (a question until its answer), not the run's."""
        started = time.monotonic()
        try:
            yield
        finally:
            self._waited += time.monotonic() - started

    def report(self, usage: Usage) -> Usage:
        """The report as recorded: valid, its wall time and tool calls filled in when left out (since the
        last report), priced. The counters start again from here."""
        now = time.monotonic()
        wall_ms = max(0, round((now - self._since - self._waited) * 1000))
        report = usage.normalised().with_defaults(wall_ms, self._tools)
        self._since, self._waited, self._tools = now, 0.0, 0
        return self._price(report) if self._price is not None else report
