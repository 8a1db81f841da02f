"""The approval schema (`app/agents/approvals.py`) and a run's open calls (`app/agents/cli/asking.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from app.agents.approvals import (
    EVERY_CALL,
    Decision,
    Rule,
    ToolCall,
    answer_error,
    decisions,
    force_error,
    question_data,
    unattended,
)
from app.agents.cli.asking import OpenCalls
from app.protocol.model import Message, Part, Role


def message(*parts: Part, metadata: dict[str, Any] | None = None) -> Message:
    return Message(message_id="m", role=Role.USER, parts=list(parts), metadata=metadata)


def bash(call_id: str, command: str, pattern: str | None = "git init *") -> ToolCall:
    return ToolCall(call_id, "Bash", {"command": command}, Rule("Bash", pattern), command=command)


@pytest.mark.parametrize(
    ("pattern", "command", "allowed"),
    [
        ("git init *", "git init -q two", True),
        ("git init:*", "git init", True),
        ("git init *", "git status", False),
        ("git init *", "git init -q x && rm -rf /", False),
        ("git init *", "git init -q x; rm -rf /", False),
        ("git init *", "git init $(rm -rf /)", False),
        ("git init *", "git init x > /etc/passwd", False),
        ("git init *", "git init 'unclosed", False),
        ("touch a.txt", "touch a.txt", True),
        ("touch a.txt", "touch a.txt b.txt", False),
        ("/bin/bash -lc 'echo hi >> f' *", "/bin/bash -lc 'echo hi >> f'", True),
        ("/bin/bash -lc 'echo hi >> f' *", "/bin/bash -lc 'echo hi >> f; rm -rf /'", False),
        (None, "anything at all", True),
    ],
)
def test_a_rule_allows_its_tool_and_pattern_word_by_word(
    pattern: str | None, command: str, allowed: bool
) -> None:
    assert Rule("Bash", pattern).allows("Bash", command) is allowed
    assert not Rule("Bash", pattern).allows("Edit", command)


def test_the_question_lists_each_call_with_the_options() -> None:
    call = ToolCall("t1", "Edit", {"file_path": "/w/a.py"}, Rule("Edit"), diff="--- a\n+++ b\n")
    assert question_data([call]) == {
        "kind": "approval",
        "options": ["allow_once", "allow_always", "deny"],
        "calls": [
            {
                "id": "t1",
                "name": "Edit",
                "input": {"file_path": "/w/a.py"},
                "always": {"tool": "Edit"},
                "diff": "--- a\n+++ b\n",
            }
        ],
    }


def test_answers_by_data_part_one_call_each_else_text_for_every_call() -> None:
    one = Part(data={"kind": "approval", "callId": "t1", "option": "allow_always"})
    two = Part(data={"kind": "approval", "callId": "t2", "option": "deny"})
    assert decisions(message(one, two)) == [Decision("t1", "allow_always"), Decision("t2", "deny")]
    assert decisions(message(Part(text="y"))) == [Decision(EVERY_CALL, "allow_once")]
    assert decisions(message(Part(text="no thanks"))) == [Decision(EVERY_CALL, "deny")]
    assert decisions(message(Part(data={"decision": "allow"}))) == [Decision(EVERY_CALL, "allow_once")]
    assert decisions(message(Part(data={"approved": False}))) == [Decision(EVERY_CALL, "deny")]


def test_a_malformed_answer_and_a_looser_mode_are_named() -> None:
    assert answer_error({"kind": "approval", "callId": "t1", "option": "maybe"}) is not None
    assert answer_error({"kind": "approval", "option": "deny"}) is not None
    assert answer_error({"kind": "approval", "callId": "t1", "option": "deny"}) is None
    assert answer_error({"decision": "allow"}) is None
    assert force_error({"force": False}, True) is None
    assert force_error({"force": False}, None) is None
    assert "stricter" in (force_error({"force": True}, False) or "")
    assert force_error({"force": True}, True) is None
    assert force_error({"force": "yes"}, True) == "metadata.force must be true or false"
    asks = message(Part(text="hi"), metadata={"force": False})
    assert unattended(True, [message(Part(text="hi"))]) and not unattended(True, [asks])
    assert not unattended(False, [message(Part(text="hi"))])


def test_one_answer_decides_one_call_and_allow_always_is_kept() -> None:
    saved: list[list[Rule]] = []
    calls = OpenCalls(lambda: [], lambda rules: saved.append(list(rules)))
    calls.add(bash("t1", "git init -q one"), "h1")
    calls.add(bash("t2", "touch x", pattern="touch x"), "h2")
    calls.add(bash("t3", "git init -q three"), "h3")
    question = calls.question()
    assert question is not None and question.parts is not None
    assert [c["id"] for c in question.parts[0].data["calls"]] == ["t1", "t2", "t3"]
    decided = calls.decide(message(Part(data={"kind": "approval", "callId": "t2", "option": "deny"})))
    assert [(o.handle, option) for o, option in decided] == [("h2", "deny")]
    assert list(calls.open) == ["t1", "t3"]
    # allow_always on t1 keeps its rule, which also allows t3 (the same pattern), still open.
    decided = calls.decide(message(Part(data={"kind": "approval", "callId": "t1", "option": "allow_always"})))
    assert [(o.handle, option) for o, option in decided] == [("h1", "allow_always"), ("h3", "allow_always")]
    assert calls.open == {} and calls.question() is None
    assert saved == [[Rule("Bash", "git init *")]]
    assert calls.allowed(bash("t4", "git init -q four"))
    # An unknown call id decides nothing; y decides every open call.
    calls.add(bash("t5", "touch y", pattern=None), "h5")
    assert calls.decide(message(Part(data={"kind": "approval", "callId": "nope", "option": "deny"}))) == []
    assert [(o.handle, option) for o, option in calls.decide(message(Part(text="y")))] == [
        ("h5", "allow_once")
    ]


def test_a_call_id_asked_twice_is_opened_twice() -> None:
    calls = OpenCalls(lambda: [], lambda rules: None)
    calls.add(bash("item-1", "make a"), "h1")
    calls.add(bash("item-1", "make b"), "h2")
    assert list(calls.open) == ["item-1", "item-1#2"]
    assert [o.handle for o, _ in calls.decide(message(Part(text="n")))] == ["h1", "h2"]
