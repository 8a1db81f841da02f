"""Approvals with choices: the data part of an `input-required` that asks for tool permission, the answers it
takes, and the rules `allow_always` leaves. One schema for every adapter and the console
(docs/agents.md#approvals).

The question (a data part beside the text question, in the status message):

    {"kind": "approval", "options": ["allow_once", "allow_always", "deny"],
     "calls": [{"id": "toolu_1", "name": "Bash", "input": {"command": "make test"},
                "always": {"tool": "Bash", "pattern": "make *"}, "diff": "..."}]}

`always` says what `allow_always` would allow from then on (the tool, and the command pattern where the CLI
gives one); `diff` is the change an edit would make, where the CLI gives it. An answer names one call:

    {"kind": "approval", "callId": "toolu_1", "option": "allow_always"}

Several such data parts in one message decide several calls; a call no answer names stays open and is asked
again. The text answers `y`/`n` (and the older data parts `{"decision": "allow"|"deny"}`, `{"approved":
true|false}`) decide every open call at once, once.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.model import Message

KIND = "approval"
"""The data part's `kind`: a client recognises the question, and the server an answer, by it."""
ALLOW_ONCE = "allow_once"
ALLOW_ALWAYS = "allow_always"
DENY = "deny"
OPTIONS = (ALLOW_ONCE, ALLOW_ALWAYS, DENY)
EVERY_CALL = "*"
"""The call id of a decision that decides every open call (a `y`/`n` text answer)."""
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\n*?\\]")
"""What a word after a rule's prefix may not hold: a second command, a redirection, a substitution, a glob."""
_YES = {"y", "yes", "allow", "approve", "approved", "ok", "accept"}


@dataclass(frozen=True, slots=True)
class Rule:
    """What an `allow_always` allows for the rest of the context's session: a tool, and when set only the
    commands `pattern` matches, word by word as a shell splits them: `git init *` (or Claude's `git init:*`)
    the commands that start with those words and go on with plain words (no `;`, `&&`, `|`, redirection or
    substitution after them), anything else that command alone."""

    tool: str
    pattern: str | None = None

    def allows(self, tool: str, command: str | None) -> bool:
        if tool != self.tool:
            return False
        if self.pattern is None:
            return True
        if command is None:
            return False
        prefix, exact = self.pattern, True
        for tail in (":*", " *"):
            if prefix.endswith(tail):
                prefix, exact = prefix[: -len(tail)], False
        try:
            want, have = shlex.split(prefix), shlex.split(command)
        except ValueError:
            return False
        if exact or len(have) < len(want) or have[: len(want)] != want:
            return have == want
        return not any(_SHELL_SYNTAX.search(word) for word in have[len(want) :])

    def wire(self) -> dict[str, str]:
        return {"tool": self.tool, **({"pattern": self.pattern} if self.pattern else {})}

    @classmethod
    def parse(cls, value: Any) -> Rule | None:
        """A rule as stored (`wire`), None for anything else."""
        if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
            return None
        pattern = value.get("pattern")
        return cls(value["tool"], pattern if isinstance(pattern, str) and pattern else None)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the CLI asks permission for."""

    id: str
    name: str
    input: Any
    always: Rule
    """What `allow_always` would allow from then on."""
    command: str | None = None
    """The shell command, for a command tool: what `Rule.pattern` is matched against."""
    diff: str | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "input": self.input,
            "always": self.always.wire(),
        }
        if self.diff:
            out["diff"] = self.diff
        return out


def summary(name: str, tool_input: Any, limit: int = 500) -> str:
    """A tool call in a line: its name and its input, short enough for a status message."""
    shown = json.dumps(tool_input, ensure_ascii=False) if tool_input is not None else ""
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return f"{name} {shown}".strip()


def describe_tool(name: str, tool_input: Any) -> str:
    """The approval question of one tool call."""
    return f"Allow {summary(name, tool_input)}? Answer y to allow, n to deny."


def describe_calls(calls: Sequence[ToolCall]) -> str:
    """The text question of an `input-required` asking for `calls` (one: as `describe_tool`)."""
    if len(calls) == 1:
        return describe_tool(calls[0].name, calls[0].input)
    lines = [f"{len(calls)} tool calls wait for approval:"]
    lines += [f"{i}. {summary(c.name, c.input)}" for i, c in enumerate(calls, 1)]
    lines.append("Answer y to allow them all, n to deny them all, or decide each with an approval data part.")
    return "\n".join(lines)


def question_data(calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The data part's data of an `input-required` asking for `calls`."""
    return {"kind": KIND, "options": list(OPTIONS), "calls": [c.wire() for c in calls]}


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer: `option` for the call `call_id` (EVERY_CALL: every open call)."""

    call_id: str
    option: str

    @property
    def allows(self) -> bool:
        return self.option != DENY


def answer_error(data: Any) -> str | None:
    """Why a data part of `kind: approval` in an answer is malformed (None: well formed, or not one)."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    if not isinstance(data.get("callId"), str) or not data["callId"]:
        return "an approval answer needs callId, the id of the call it decides"
    if data.get("option") not in OPTIONS:
        return f"an approval answer's option must be one of {', '.join(OPTIONS)}"
    return None


def decisions(message: Message) -> list[Decision]:
    """What an answer decides: its approval data parts, one call each; else an older data part or the text
    (`y`, `yes`, `allow`...: allow; anything else: deny) for every open call."""
    out: list[Decision] = []
    for part in message.parts:
        data = part.data
        if isinstance(data, dict) and data.get("kind") == KIND and answer_error(data) is None:
            out.append(Decision(data["callId"], data["option"]))
    if out:
        return out
    for part in message.parts:
        data = part.data
        if isinstance(data, dict):
            if isinstance(data.get("approved"), bool):
                return [Decision(EVERY_CALL, ALLOW_ONCE if data["approved"] else DENY)]
            decision = data.get("decision")
            if isinstance(decision, str):
                said = decision.strip().lower()
                option = said if said in OPTIONS else ALLOW_ONCE if said in _YES else DENY
                return [Decision(EVERY_CALL, option)]
    allowed = message.text().strip().strip(".!").lower() in _YES
    return [Decision(EVERY_CALL, ALLOW_ONCE if allowed else DENY)]


def text_diff(path: str, old: str, new: str) -> str:
    """A unified diff of one file's `old` and `new` text (an edit's snippet, or a whole new file)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


FORCE_KEY = "force"
"""The message metadata a task asks its approval mode with: `false` asks for approvals on a role that runs
unattended (a stricter mode); `true` on a role that asks is refused (a looser one)."""


def force_error(metadata: dict[str, Any] | None, role_force: bool | None) -> str | None:
    """Why a message's `metadata.force` is refused on a role of approval mode `role_force` (None: an agent
    with no approval mode); None when it may have it."""
    if not metadata or FORCE_KEY not in metadata:
        return None
    asked = metadata[FORCE_KEY]
    if not isinstance(asked, bool):
        return "metadata.force must be true or false"
    if asked and role_force is not True:
        mode = "has no approval mode" if role_force is None else "asks before tools run (force=false)"
        return (
            f"metadata.force=true asks for a looser approval mode than the role's: it {mode}; a task may "
            "only ask for a stricter one (force=false)"
        )
    return None


def unattended(role_force: bool, messages: Iterable[Message]) -> bool:
    """Whether a task's run skips the CLI's permission prompts: its role's `force`, unless a message of
    the task asked for approvals (`metadata.force: false`)."""
    return role_force and not any((m.metadata or {}).get(FORCE_KEY) is False for m in messages)


def allowed_by(rules: Iterable[Rule], call: ToolCall) -> bool:
    """Whether an earlier `allow_always` of the context's session allows `call` without asking."""
    return any(rule.allows(call.name, call.command) for rule in rules)
