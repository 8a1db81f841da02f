"""Gemini CLI output → AgentEvents, on the lines CLI-REAL-RUNS.md and CLI-STREAM-FORMATS.md document."""

# ruff: noqa: E501 - the lines are the CLI's output, kept whole to be recognisable

from __future__ import annotations

import json

from app.agents.cli.gemini import pick_option
from app.agents.cli.gemini_events import AcpParser, StreamJsonParser
from app.agents.events import AgentEvent

SESSION = "4b608cb5-1111-4222-8333-444455556666"
TOOL_ID = "run_shell_command__run_shell_command_1795641832981_0"


def feed(parser: StreamJsonParser, *lines: str) -> list[AgentEvent]:
    return [ev for line in lines for ev in parser.feed(json.loads(line))]


def test_headless_text_run() -> None:
    parser = StreamJsonParser()
    events = feed(
        parser,
        f'{{"type":"init","timestamp":"2026-11-25T21:23:36.385Z","session_id":"{SESSION}","model":"auto"}}',
        '{"type":"message","timestamp":"2026-11-25T21:23:36.390Z","role":"user","content":"say hi"}',
        '{"type":"message","timestamp":"2026-11-25T21:23:36.400Z","role":"assistant","content":"hi from ","delta":true}',
        '{"type":"message","timestamp":"2026-11-25T21:23:36.401Z","role":"assistant","content":"the fake model","delta":true}',
        '{"type":"result","timestamp":"2026-11-25T21:23:36.500Z","status":"success","stats":{"total_tokens":30,"input_tokens":20,"output_tokens":10,"cached":0,"input":20,"duration_ms":89,"tool_calls":0}}',
    )
    assert [e.kind.value for e in events] == ["init", "thinking", "thinking", "done"]
    assert (events[0].session_id, events[0].model) == (SESSION, "auto")
    assert parser.session_id == SESSION
    assert [e.text for e in events[1:3]] == ["hi from ", "the fake model"]
    assert events[3].summary == "hi from the fake model"
    assert events[3].stats is not None and events[3].stats["total_tokens"] == 30


def test_headless_tool_use_and_results() -> None:
    events = feed(
        StreamJsonParser(),
        f'{{"type":"tool_use","timestamp":"…","tool_name":"run_shell_command","tool_id":"{TOOL_ID}","parameters":{{"command":"echo hi > marker.txt","description":"write marker"}}}}',
        f'{{"type":"tool_result","timestamp":"…","tool_id":"{TOOL_ID}","status":"success","output":""}}',
        '{"type":"tool_use","timestamp":"…","tool_name":"list_directory","tool_id":"list_directory-1722506401500","parameters":{"path":"src"}}',
        '{"type":"tool_result","timestamp":"…","tool_id":"list_directory-1722506401500","status":"success","output":"main.py\\nutil.py"}',
        '{"type":"tool_result","timestamp":"…","tool_id":"run_shell_command-1722506401800","status":"error","error":{"type":"permission_denied","message":"Tool execution denied"}}',
    )
    assert [(e.kind.value, e.tool_name, e.text) for e in events] == [
        ("tool_use", "run_shell_command", ""),
        ("tool_result", "run_shell_command", "done"),
        ("tool_use", "list_directory", ""),
        ("tool_result", "list_directory", "main.py\nutil.py"),
        ("tool_result", None, "error: Tool execution denied"),
    ]
    assert events[0].tool_input == {"command": "echo hi > marker.txt", "description": "write marker"}


def test_headless_warning_is_not_fatal_but_an_error_result_is() -> None:
    parser = StreamJsonParser()
    warning = '{"type":"error","timestamp":"…","severity":"warning","message":"Loop detected, stopping"}'
    assert feed(parser, warning) == []
    events = feed(parser, '{"type":"result","timestamp":"…","status":"error","stats":{}}')
    assert [e.kind.value for e in events] == ["error"]
    assert events[0].text == "gemini: Loop detected, stopping"
    failed = feed(
        StreamJsonParser(),
        '{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"turn limit"}}',
    )
    assert failed[0].text == "gemini: turn limit"


def test_acp_updates() -> None:
    parser = AcpParser()
    updates = [
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "thinking…"}},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "title": "echo hi > marker.txt",
            "kind": "execute",
            "status": "pending",
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "hi"}}],
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": "failed", "content": []},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Done: "}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ran it."}},
    ]
    events = [ev for u in updates for ev in parser.feed(u)]
    assert [(e.kind.value, e.tool_name, e.text) for e in events] == [
        ("tool_use", "execute", ""),
        ("tool_result", "execute", "hi"),
        ("tool_result", None, "error: failed"),
        ("thinking", None, "Done: "),
        ("thinking", None, "ran it."),
    ]
    assert events[0].tool_input == {"title": "echo hi > marker.txt"}
    assert parser.summary == "Done: ran it."


def test_permission_request_tool_is_announced_once() -> None:
    parser = AcpParser()
    call = {"toolCallId": "t9", "status": "pending", "title": "echo hi > marker.txt", "kind": "execute"}
    assert not parser.known(call)
    parser.feed({"sessionUpdate": "tool_call", **call})
    assert parser.known(call)


def test_pick_option_takes_the_kind_chosen_and_falls_back() -> None:
    options = [
        {"optionId": "proceed_always", "name": "Allow for this session", "kind": "allow_always"},
        {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
    ]
    assert pick_option(options, "allow_once") == "proceed_once"
    assert pick_option(options, "allow_always") == "proceed_always"
    assert pick_option(options, "deny") == "cancel"
    assert pick_option(options[:1], "allow_once") == "proceed_always"
    assert pick_option(options[1:2], "allow_always") == "proceed_once"
    assert pick_option(options[:2], "deny") is None
