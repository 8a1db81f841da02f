"""A run's open permission requests and the context's `allow_always` rules (`approvals.py` is the schema).

A CLI adapter hands each permission request to `CliRun.ask_permission` as a `ToolCall` and a handle of its
own (what it needs to answer the CLI: a request id...). A request an earlier `allow_always` of the context
allows is answered at once; the others stay open until an answer decides them, one call per approval data
part, or every open call for a `y`/`n`. A call left open is asked again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.protocol.model import Message

from ..approvals import ALLOW_ALWAYS, EVERY_CALL, Rule, ToolCall, allowed_by, decisions, describe_calls
from ..events import AgentEvent


@dataclass(slots=True)
class OpenCall:
    call: ToolCall
    handle: Any
    """The adapter's own: what it needs to answer the CLI."""


class OpenCalls:
    """The calls one run waits on, in the order asked, and the rules the context's session keeps."""

    def __init__(self, load: Callable[[], list[Rule]], save: Callable[[list[Rule]], None]) -> None:
        self._load, self._save = load, save
        self._rules: list[Rule] | None = None
        self.open: dict[str, OpenCall] = {}

    @property
    def rules(self) -> list[Rule]:
        if self._rules is None:
            self._rules = self._load()
        return self._rules

    def allowed(self, call: ToolCall) -> bool:
        return allowed_by(self.rules, call)

    def add(self, call: ToolCall, handle: Any) -> None:
        """Open `call`; an id already open (a CLI asking twice for one item) gets a suffix, so no request
        is left unanswered."""
        n = 1
        while call.id in self.open:
            n += 1
            call = dataclasses.replace(call, id=f"{call.id.split('#')[0]}#{n}")
        self.open[call.id] = OpenCall(call, handle)

    def question(self) -> AgentEvent | None:
        """The approval_required that lists every open call (None: none open)."""
        calls = [o.call for o in self.open.values()]
        return AgentEvent.approval_required(describe_calls(calls), calls=calls) if calls else None

    def decide(self, message: Message) -> list[tuple[OpenCall, str]]:
        """The open calls `message` decides, with the option each gets; they are no longer open. An
        `allow_always` keeps its rule for the context, and allows the other open calls it covers."""
        decided: list[tuple[OpenCall, str]] = []
        for d in decisions(message):
            ids = list(self.open) if d.call_id == EVERY_CALL else [d.call_id]
            for call_id in ids:
                if (opened := self.open.pop(call_id, None)) is not None:
                    decided.append((opened, d.option))
                    if d.option == ALLOW_ALWAYS:
                        self._keep(opened.call.always)
        for call_id, opened in list(self.open.items()):
            if self.allowed(opened.call):
                del self.open[call_id]
                decided.append((opened, ALLOW_ALWAYS))
        return decided

    def _keep(self, rule: Rule) -> None:
        if rule not in self.rules:
            self.rules.append(rule)
            self._save(self.rules)
