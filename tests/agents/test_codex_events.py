"""Codex output → AgentEvents, on the lines CLI-REAL-RUNS.md and CLI-STREAM-FORMATS.md document."""

# ruff: noqa: E501 - the lines are the CLI's output, kept whole to be recognisable

from __future__ import annotations

import json

from app.agents.cli.codex_events import AppServerParser, ExecParser
from app.agents.events import AgentEvent, AgentEventKind

THREAD = "01a21495-23b8-7b10-852c-e7f3a0c1e737"


def feed_exec(parser: ExecParser, *lines: str) -> list[AgentEvent]:
    return [ev for line in lines for ev in parser.feed(json.loads(line))]


def kinds(events: list[AgentEvent]) -> list[str]:
    return [ev.kind.value for ev in events]


def test_exec_text_run_with_the_model_metadata_error_item() -> None:
    parser = ExecParser(model="gpt-5.2-codex")
    events = feed_exec(
        parser,
        f'{{"type":"thread.started","thread_id":"{THREAD}"}}',
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for '
        "`gpt-fake` not found. Defaulting to fallback metadata; this can degrade performance and cause "
        'issues."}}',
        '{"type":"turn.started"}',
        '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"hi from the fake model"}}',
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,'
        '"cache_write_input_tokens":0,"output_tokens":5,"reasoning_output_tokens":0}}',
    )
    assert kinds(events) == ["init", "thinking", "done"]
    assert events[0].session_id == THREAD and events[0].model == "gpt-5.2-codex"
    assert parser.thread_id == THREAD
    assert events[1].text == "hi from the fake model"
    assert events[2].summary == "hi from the fake model"
    assert events[2].stats is not None and events[2].stats["output_tokens"] == 5


def test_exec_accepts_the_older_item_type_and_assistant_message_shape() -> None:
    events = feed_exec(
        ExecParser(),
        '{"type":"item.completed","item":{"id":"item_5","item_type":"assistant_message","text":"old shape"}}',
        '{"type":"item.started","item":{"id":"item_1","item_type":"command_execution","command":"bash -lc ls",'
        '"aggregated_output":"","exit_code":null,"status":"in_progress"}}',
    )
    assert [(e.kind, e.text or e.tool_name) for e in events] == [
        (AgentEventKind.THINKING, "old shape"),
        (AgentEventKind.TOOL_USE, "shell"),
    ]


def test_exec_command_started_then_completed() -> None:
    command = "/bin/bash -lc 'echo hi > marker.txt'"
    events = feed_exec(
        ExecParser(),
        '{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"'
        + command
        + '","aggregated_output":"","exit_code":null,"status":"in_progress"}}',
        '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"'
        + command
        + '","aggregated_output":"","exit_code":0,"status":"completed"}}',
        '{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done: ran the command."}}',
    )
    assert kinds(events) == ["tool_use", "tool_result", "thinking"]
    assert events[0].tool_name == "shell" and events[0].tool_input == {"command": command}
    assert events[1].text == "exit code 0"


def test_exec_items_completed_without_a_start_announce_the_tool_first() -> None:
    events = feed_exec(
        ExecParser(),
        '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls",'
        '"aggregated_output":"README.md\\nsrc\\n","exit_code":0,"status":"completed"}}',
        '{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"src/app.py",'
        '"kind":"update"}],"status":"completed"}}',
        '{"type":"item.started","item":{"id":"item_3","type":"mcp_tool_call","server":"github","tool":'
        '"search_issues","arguments":{"q":"is:open"},"result":null,"error":null,"status":"in_progress"}}',
        '{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Planning the change**"}}',
        '{"type":"item.updated","item":{"id":"item_4","type":"todo_list","items":[]}}',
    )
    assert [(e.kind.value, e.tool_name, e.text) for e in events] == [
        ("tool_use", "shell", ""),
        ("tool_result", "shell", "README.md\nsrc"),
        ("tool_use", "file_change", ""),
        ("tool_result", "file_change", "completed: src/app.py"),
        ("tool_use", "github.search_issues", ""),
    ]


def test_exec_failure_uses_the_turn_error_and_remembers_other_errors() -> None:
    parser = ExecParser()
    assert feed_exec(parser, '{"type":"error","message":"unexpected status 401 Unauthorized"}') == []
    assert parser.last_error == "unexpected status 401 Unauthorized"
    events = feed_exec(
        parser, '{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}'
    )
    assert kinds(events) == ["error"]
    assert events[0].text == "codex: stream disconnected before completion"


def feed_app(parser: AppServerParser, *lines: str) -> list[AgentEvent]:
    out = []
    for line in lines:
        obj = json.loads(line)
        out += parser.feed(obj["method"], obj["params"])
    return out


def test_app_server_deltas_tools_usage_and_completion() -> None:
    parser = AppServerParser()
    events = feed_app(
        parser,
        '{"method":"item/started","params":{"item":{"type":"userMessage","id":"u1","content":[]}}}',
        '{"method":"item/started","params":{"item":{"type":"commandExecution","id":"call_1","command":'
        '"/bin/bash -lc \'echo hi > marker.txt\'","status":"inProgress","aggregatedOutput":null,"exitCode":null}}}',
        '{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"call_1","command":'
        '"/bin/bash -lc \'echo hi > marker.txt\'","status":"completed","aggregatedOutput":null,"exitCode":0}}}',
        '{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"total":{"totalTokens":30,'
        '"inputTokens":20,"outputTokens":10},"last":{"totalTokens":15}}}}',
        '{"method":"item/started","params":{"item":{"type":"agentMessage","id":"msg_2","text":""}}}',
        '{"method":"item/agentMessage/delta","params":{"itemId":"msg_2","delta":"Done: "}}',
        '{"method":"item/agentMessage/delta","params":{"itemId":"msg_2","delta":"ran it."}}',
        '{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"msg_2","text":"Done: ran it."}}}',
        '{"method":"turn/completed","params":{"threadId":"t","turn":{"id":"x","status":"completed","error":null}}}',
    )
    assert [(e.kind.value, e.tool_name, e.text) for e in events] == [
        ("tool_use", "shell", ""),
        ("tool_result", "shell", "exit code 0"),
        ("thinking", None, "Done: "),
        ("thinking", None, "ran it."),
        ("done", None, ""),
    ]
    assert events[-1].summary == "Done: ran it."
    assert events[-1].stats == {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10}


def test_app_server_message_without_deltas_is_sent_whole_and_declines_are_named() -> None:
    events = feed_app(
        AppServerParser(),
        '{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"m","text":"whole"}}}',
        '{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"c","command":"rm -rf x",'
        '"status":"declined","exitCode":null}}}',
    )
    assert [(e.kind.value, e.text) for e in events] == [
        ("thinking", "whole"),
        ("tool_use", ""),
        ("tool_result", "declined by the user"),
    ]


def test_app_server_failed_turn_carries_its_error() -> None:
    parser = AppServerParser()
    events = feed_app(
        parser,
        '{"method":"error","params":{"error":{"message":"rate limited"},"willRetry":true}}',
        '{"method":"turn/completed","params":{"turn":{"status":"failed","error":{"message":"quota exceeded"}}}}',
    )
    assert [e.text for e in events] == ["codex: turn failed: quota exceeded"]
    interrupted = feed_app(
        AppServerParser(),
        '{"method":"turn/completed","params":{"turn":{"status":"interrupted","error":null}}}',
    )
    assert interrupted[0].kind is AgentEventKind.ERROR and "interrupted" in interrupted[0].text


def test_approval_requests_are_described_with_the_item_they_are_about() -> None:
    parser = AppServerParser()
    feed_app(
        parser,
        '{"method":"item/started","params":{"item":{"type":"fileChange","id":"fc1","changes":'
        '[{"path":"src/app.py","kind":"update"}],"status":"inProgress"}}}',
    )
    name, tool_input = parser.describe("item/fileChange/requestApproval", {"itemId": "fc1", "reason": None})
    assert name == "file_change" and tool_input["changes"] == [{"path": "src/app.py", "kind": "update"}]
    name, tool_input = parser.describe(
        "item/commandExecution/requestApproval", {"command": "/bin/bash -lc 'ls'", "cwd": "/srv/ws"}
    )
    assert (name, tool_input) == ("shell", {"command": "/bin/bash -lc 'ls'", "cwd": "/srv/ws"})
