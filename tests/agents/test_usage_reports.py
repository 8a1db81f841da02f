"""What each adapter makes of its CLI's usage report, on lines the real CLIs printed against the fake model
APIs (Claude Code 2.1.197, Codex 0.169.0, Gemini CLI 0.61.0), and how a run's reports leave the agent API:
in the metadata of the status-update carrying them, wall time and tool calls filled in, priced."""

# ruff: noqa: E501 - the lines are the CLIs' output, kept whole to be recognisable

from __future__ import annotations

import asyncio
import json

import pytest

from app.agents.cli.claude import claude_usage
from app.agents.cli.codex_events import AppServerParser, ExecParser, kept_tokens
from app.agents.cli.cursor import cursor_usage
from app.agents.cli.gemini_events import StreamJsonParser, acp_usage
from app.agents.cli.ndjson import parse_event, parse_usage
from app.agents.emissions import TOOL_CALL_KEY, TOOL_INPUT_LIMIT
from app.agents.events import AgentEvent, AgentEventKind
from app.agents.sdk import Request, TaskContext
from app.protocol.events import Event, StatusUpdate
from app.protocol.model import Message, Part, Role, TaskState
from app.protocol.usage import COST_PRICE_TABLE, COST_REPORTED, USAGE_KEY, ModelUsage, Usage
from app.runner.prices import Price, PriceTable
from tests.agents.test_event_agent import run

CLAUDE_RESULT = '{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":182,"duration_api_ms":52,"num_turns":2,"result":"Done: the tool succeeded.","stop_reason":"end_turn","session_id":"ec1a818f-df24-42ba-b2cd-a834da818e14","total_cost_usd":0.00047,"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":14,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard"},"modelUsage":{"claude-opus-4-8[1m]":{"inputTokens":24,"outputTokens":14,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.00047,"contextWindow":1000000,"maxOutputTokens":64000}},"permission_denials":[],"terminal_reason":"completed"}'


def test_claude_takes_model_usage_with_its_cost_and_the_turns() -> None:
    usage = claude_usage(json.loads(CLAUDE_RESULT), "claude-opus-4-8[1m]")
    assert usage == Usage((ModelUsage("claude-opus-4-8[1m]", 24, 14, 0, 0, 0.00047, COST_REPORTED),), turns=2)


def test_claude_without_model_usage_takes_usage_and_the_total_cost_for_the_init_model() -> None:
    line = json.loads(CLAUDE_RESULT)
    del line["modelUsage"]
    line["usage"].update(cache_read_input_tokens=16827, cache_creation_input_tokens=212)
    usage = claude_usage(line, "claude-sonnet-4-5")
    assert usage is not None
    assert usage.models == (ModelUsage("claude-sonnet-4-5", 24, 14, 16827, 212, 0.00047, COST_REPORTED),)
    assert claude_usage({"type": "result", "subtype": "success"}, None) is None


def feed_exec(parser: ExecParser, *lines: str) -> list[AgentEvent]:
    return [ev for line in lines for ev in parser.feed(json.loads(line))]


def test_codex_exec_reports_the_turns_share_of_the_threads_total() -> None:
    """`exec resume` reported 30/15 after a first turn of 20/10: the second turn used 10/5."""
    first = ExecParser(model="gpt-fake")
    done = feed_exec(
        first,
        '{"type":"turn.completed","usage":{"input_tokens":20,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0}}',
    )[-1]
    assert done.usage == Usage((ModelUsage("gpt-fake", 20, 10),))
    assert first.total is not None
    second = ExecParser(model="gpt-fake", baseline=first.total)
    done = feed_exec(
        second,
        '{"type":"turn.completed","usage":{"input_tokens":30,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":15,"reasoning_output_tokens":0}}',
    )[-1]
    assert done.usage == Usage((ModelUsage("gpt-fake", 10, 5),))
    assert done.stats == {
        "input_tokens": 30,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": 15,
        "reasoning_output_tokens": 0,
    }, "the result artifact keeps what the CLI said"


def test_codex_cached_input_is_taken_out_of_the_input_tokens() -> None:
    done = feed_exec(
        ExecParser(),
        '{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}',
    )[-1]
    assert done.usage == Usage((ModelUsage("", 315, 122, 24448, 0),))


def test_codex_app_server_subtracts_the_total_it_repeats_for_the_previous_turn() -> None:
    def tokens(turn: str, total_in: int, total_out: int) -> tuple[str, dict]:
        total = {
            "totalTokens": total_in + total_out,
            "inputTokens": total_in,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
            "outputTokens": total_out,
            "reasoningOutputTokens": 0,
        }
        last = {**total, "inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
        return "thread/tokenUsage/updated", {
            "threadId": "t",
            "turnId": turn,
            "tokenUsage": {"total": total, "last": last},
        }

    parser = AppServerParser(model="gpt-5.2-codex")
    for method, params in (tokens("turn-1", 20, 10), tokens("turn-2", 30, 15)):
        assert parser.feed(method, params) == []
    done = parser.feed("turn/completed", {"threadId": "t", "turn": {"id": "turn-2", "status": "completed"}})[
        0
    ]
    assert done.kind is AgentEventKind.DONE
    assert done.usage == Usage((ModelUsage("gpt-5.2-codex", 10, 5),))
    fresh = AppServerParser()
    fresh.feed(*tokens("turn-1", 20, 10))
    assert fresh.feed("turn/completed", {"turn": {"id": "turn-1", "status": "completed"}})[0].usage == Usage(
        (ModelUsage("", 20, 10),)
    )
    kept = AppServerParser(
        baseline={"input": 20, "cached": 0, "cache_write": 0, "output": 10, "reasoning": 0}
    )
    kept.feed(*tokens("turn-2", 30, 15))
    failed = kept.feed("turn/completed", {"turn": {"id": "turn-2", "status": "failed"}})[0]
    assert failed.kind is AgentEventKind.ERROR and failed.usage == Usage((ModelUsage("", 10, 5),))


def test_gemini_headless_stats_per_model() -> None:
    parser = StreamJsonParser()
    parser.feed(
        json.loads(
            '{"type":"init","timestamp":"2026-11-26T17:38:40.625Z","session_id":"6e84fa6d","model":"auto"}'
        )
    )
    (done,) = parser.feed(
        json.loads(
            '{"type":"result","timestamp":"2026-11-26T17:38:40.767Z","status":"success","stats":{"total_tokens":90,"input_tokens":60,"output_tokens":30,"cached":20,"input":40,"duration_ms":143,"tool_calls":1,"models":{"fake-gemini":{"total_tokens":90,"input_tokens":60,"output_tokens":30,"cached":20,"input":40}}}}'
        )
    )
    assert done.usage == Usage((ModelUsage("fake-gemini", 40, 30, 20),))
    parser = StreamJsonParser(model="gemini-2.5-pro")
    (done,) = parser.feed(
        {"type": "result", "status": "success", "stats": {"input_tokens": 7, "output_tokens": 2, "cached": 3}}
    )
    assert done.usage == Usage((ModelUsage("gemini-2.5-pro", 4, 2, 3),))


def test_gemini_acp_quota_per_model() -> None:
    quota = json.loads(
        '{"token_count":{"input_tokens":40,"output_tokens":20},"model_usage":[{"model":"gemini-3.8-flash","token_count":{"input_tokens":20,"output_tokens":10}},{"model":"auto","token_count":{"input_tokens":20,"output_tokens":10}}]}'
    )
    assert acp_usage(quota, None) == Usage(
        (ModelUsage("gemini-3.8-flash", 20, 10), ModelUsage("auto", 20, 10))
    )
    assert acp_usage({"token_count": {"input_tokens": 4, "output_tokens": 1}}, "m") == Usage(
        (ModelUsage("m", 4, 1),)
    )
    assert acp_usage(None, "m") is None


def test_cursor_reports_no_tokens_unless_its_result_carries_usage() -> None:
    result = {"type": "result", "subtype": "success", "duration_ms": 4986, "result": "ok"}
    assert cursor_usage(result, "Auto") == Usage()
    result["usage"] = {"inputTokens": 9, "outputTokens": 3, "cacheReadTokens": 1}
    assert cursor_usage(result, "Auto") == Usage((ModelUsage("Auto", 9, 3, 1),))


def test_ndjson_usage_lines() -> None:
    ev = parse_event(
        {
            "kind": "usage",
            "usage": {"model": "m", "input_tokens": 5, "output_tokens": 2, "cost_usd": 0.1, "turns": 1},
        }
    )
    assert ev is not None and ev.kind is AgentEventKind.USAGE
    assert ev.usage == Usage((ModelUsage("m", 5, 2, 0, 0, 0.1, COST_REPORTED),), turns=1)
    several = parse_usage(
        {"models": [{"model": "a", "output_tokens": 1}, {"model": "b", "cache_read_tokens": 4}], "wall_ms": 9}
    )
    assert several == Usage((ModelUsage("a", 0, 1), ModelUsage("b", 0, 0, 4)), wall_ms=9)
    assert parse_usage({"model": "m", "input_tokens": -3}) is None
    assert parse_usage("lots") is None
    done = parse_event({"kind": "done", "summary": "s", "usage": {"model": "m", "input_tokens": 1}})
    assert done is not None and done.usage == Usage((ModelUsage("m", 1),))


# ---- through the agent API ---------------------------------------------------------------------------


def usage_of(ev: Event) -> Usage | None:
    raw = (ev.metadata or {}).get(USAGE_KEY) if isinstance(ev, StatusUpdate) else None
    return None if raw is None else Usage.from_wire(raw)


async def test_done_and_error_carry_their_usage_on_the_final_status() -> None:
    usage = Usage.of("m", input_tokens=3, output_tokens=1, turns=2)
    out = await run([AgentEvent.tool_use("Read", {"path": "x"}), AgentEvent.done("ok", usage=usage)])
    final = out[-1]
    assert isinstance(final, StatusUpdate) and final.status.state is TaskState.COMPLETED
    recorded = usage_of(final)
    assert recorded is not None
    assert recorded.models == usage.models and recorded.turns == 2
    assert recorded.tool_calls == 1, "counted from the tool_use"
    assert recorded.wall_ms is not None and recorded.wall_ms >= 0
    out = await run([AgentEvent.error("boom", usage=usage)])
    assert out[-1].status.state is TaskState.FAILED and usage_of(out[-1]) is not None  # type: ignore[union-attr]
    assert all(usage_of(ev) is None for ev in (await run([AgentEvent.done("ok")])))


async def test_a_usage_event_is_reported_at_once_and_each_report_counts_from_the_last() -> None:
    out = await run(
        [
            AgentEvent.tool_use("a"),
            AgentEvent.usage_report(Usage.of("m", input_tokens=1)),
            AgentEvent.approval_required("go?"),
            AgentEvent.tool_use("b"),
            AgentEvent.tool_use("c"),
            AgentEvent.done(usage=Usage.of("m", input_tokens=2)),
        ],
        answer="y",
    )
    reports = [(ev.status.state, usage_of(ev)) for ev in out if usage_of(ev) is not None]  # type: ignore[union-attr]
    assert [(state, u.tool_calls, u.tokens("input")) for state, u in reports] == [  # type: ignore[union-attr]
        (TaskState.WORKING, 1, 1),
        (TaskState.COMPLETED, 2, 2),
    ]


async def test_the_tool_call_is_in_the_status_message_metadata_text_unchanged() -> None:
    big = {"content": "x" * (TOOL_INPUT_LIMIT + 10)}
    out = await run(
        [AgentEvent.tool_use("Edit", {"path": "a.py"}), AgentEvent.tool_use("Write", big), AgentEvent.done()]
    )
    calls = [ev.status.message for ev in out if isinstance(ev, StatusUpdate) and ev.status.message]
    assert [m.text() for m in calls[:2]] == ["Using tool: Edit", "Using tool: Write"]
    assert calls[0].metadata == {TOOL_CALL_KEY: {"name": "Edit", "input": {"path": "a.py"}}}
    cut = calls[1].metadata[TOOL_CALL_KEY]  # type: ignore[index]
    assert (
        cut["truncated"] is True and isinstance(cut["input"], str) and len(cut["input"]) == TOOL_INPUT_LIMIT
    )
    assert cut["input"].startswith('{"content": "xxx')


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The usage meter's monotonic clock, which a test moves on by hand (`clock[0] += seconds`)."""
    now = [100.0]
    monkeypatch.setattr("app.agents.emissions.time.monotonic", lambda: now[0])
    return now


async def test_wall_time_leaves_out_waiting_for_the_answer_and_the_table_prices(clock: list[float]) -> None:
    out: list[Event] = []
    message = Message("m-1", Role.USER, [Part(text="hi")], context_id="c", task_id="t")

    async def emit(batch: list[Event]) -> None:
        out.extend(batch)

    table = PriceTable({"m": Price(input=1, output=2)})
    ctx = TaskContext(Request(message, "c", "alice"), "t", emit, price=table.price)
    clock[0] += 2.0  # working
    ctx.deliver(Message("m-2", Role.USER, [Part(text="y")]))

    async def answered_after_a_while() -> None:
        await ctx.ask("go?", usage=Usage.of("m", input_tokens=1_000_000))

    asking = asyncio.create_task(answered_after_a_while())
    await asyncio.sleep(0)
    await asking
    clock[0] += 0.5  # working again
    await ctx.complete(usage=Usage.of("m", output_tokens=1_000_000, cost_usd=0.25))
    asked, done = usage_of(out[0]), usage_of(out[-1])
    assert asked is not None and done is not None
    assert asked.wall_ms == 2000
    assert asked.models[0].cost_usd == 1.0 and asked.models[0].cost_source == COST_PRICE_TABLE
    assert done.models[0].cost_usd == 0.25 and done.models[0].cost_source == COST_REPORTED
    assert done.wall_ms == 500


async def test_waiting_for_the_answer_is_not_wall_time(clock: list[float]) -> None:
    out: list[Event] = []
    message = Message("m-1", Role.USER, [Part(text="hi")], context_id="c", task_id="t")

    async def emit(batch: list[Event]) -> None:
        out.extend(batch)
        if isinstance(batch[-1], StatusUpdate) and batch[-1].status.state is TaskState.INPUT_REQUIRED:
            clock[0] += 60.0  # the user takes a minute
            ctx.deliver(Message("m-2", Role.USER, [Part(text="y")]))

    ctx = TaskContext(Request(message, "c", "alice"), "t", emit)
    clock[0] += 1.0
    await ctx.ask("go?")
    clock[0] += 3.0
    await ctx.complete(usage=Usage.of("m"))
    done = usage_of(out[-1])
    assert done is not None and done.wall_ms == 4000


def test_codex_keeps_the_threads_total_in_the_form_it_reads_back() -> None:
    parser = ExecParser()
    feed_exec(
        parser,
        '{"type":"turn.completed","usage":{"input_tokens":20,"cached_input_tokens":8,"output_tokens":10}}',
    )
    kept = json.loads(json.dumps(parser.total))  # as the session file keeps it
    resumed = ExecParser(baseline=kept_tokens(kept))
    done = feed_exec(
        resumed,
        '{"type":"turn.completed","usage":{"input_tokens":30,"cached_input_tokens":12,"output_tokens":15}}',
    )[-1]
    assert done.usage == Usage((ModelUsage("", 6, 5, 4),))
    assert kept_tokens(None) is None


def test_a_tool_input_that_is_not_json_is_shown_as_text() -> None:
    from app.agents.emissions import tool_call_metadata

    assert tool_call_metadata("calc", {"x": float("nan")}) == {
        TOOL_CALL_KEY: {"name": "calc", "input": "{'x': nan}"}
    }
    assert tool_call_metadata("ls", None) == {TOOL_CALL_KEY: {"name": "ls"}}
