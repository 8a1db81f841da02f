"""What each CLI's runs used, as the server records it, against what the CLI itself printed.

The real Claude Code, Codex and Gemini CLIs (pinned, jailed, against the fake model APIs of
tests/support/fakes, which report input, output and cached tokens) and the fake `cursor-agent` and `ndjson`
commands run behind a real server (SQLite) through `tests/support/fakes/tee_cli.sh`, which keeps a copy of
the CLI's stdout in the task's workspace. For every CLI: the usage in the task's metadata (and in `GET
/usage`) is what the CLI's own report line says (Codex: the thread's total less its total before the turn),
priced by PRICE_TABLE_FILE when the CLI gives no cost; a run that asks for approval (input-required, then the
answer) is one report of the whole run; turns resumed in a context add up; the official a2a-sdk client (v1.0
and v0.3) reads the same usage in the task's metadata.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest
from google.protobuf import json_format

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from tests.cli.test_cli_fakes import PYTHON
from tests.conftest import make_server
from tests.interop.test_interop_sdk import only_v03
from tests.support.clis import (
    CLI_BIN,
    FAKES,
    install_clis,
    send_message,
    status_text,
    wait_until_stopped,
)
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.gemini_fake import GeminiFake, write_gemini_home
from tests.support.fakes.openai_fake import API_KEY_ENV, OpenAIFake, write_codex_home
from tests.support.server import ServerProcess

TEE = FAKES / "tee_cli.sh"
OUTPUT = ".cli-stdout.jsonl"
PRICES = {
    "gpt-fake": {"input": 1.5, "output": 6.0, "cacheRead": 0.25},
    "fake-gemini": {"input": 0.5, "output": 2.0, "cacheRead": 0.125},
    "fake-ndjson": {"input": 1.0, "output": 4.0},
}
"""USD per million tokens of the models whose CLI reports no cost (PRICE_TABLE_FILE)."""
WAIT_S = 30


def cost(model: str, tokens_in: int, tokens_out: int, cached: int = 0) -> float:
    p = PRICES[model]
    return (tokens_in * p["input"] + tokens_out * p["output"] + cached * p.get("cacheRead", p["input"])) / 1e6


@dataclass
class Served:
    server: ServerProcess
    client: httpx.AsyncClient
    root: Path

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]

    def printed(self, task: dict) -> list[dict[str, Any]]:
        path = self.workspace(task) / OUTPUT
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    async def printed_after(
        self, task: dict, before: int, done: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        """What the CLI printed for this run (the lines after the first `before`), once `done` holds of them
        (tee may write the file a moment after the server read the line)."""
        async with asyncio.timeout(WAIT_S):
            while not done(lines := self.printed(task)[before:]):
                await asyncio.sleep(0.05)
        return lines

    async def usage(self, **params: str) -> dict[str, Any]:
        resp = await self.client.get("/usage", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()


Serve = Callable[..., Awaitable[Served]]


@pytest.fixture(scope="module")
def fakes() -> Any:
    install_clis()
    anthropic = FakeAnthropic().start()
    openai, gemini = OpenAIFake(), GeminiFake()
    yield {"claude": anthropic.url, "codex": openai.url, "gemini": gemini.url}
    anthropic.stop()
    openai.close()
    gemini.close()


def _cli_env(cli: str, url: str, tmp: Path) -> dict[str, str]:
    real = os.path.realpath(CLI_BIN / cli)
    env: dict[str, str] = {"TEE_CLI_BIN": real}
    settings = {
        "AGENT_EGRESS_ALLOW": url.removeprefix("http://"),
        "AGENT_SANDBOX_READ": f"{FAKES},{os.path.realpath(CLI_BIN.parent)}",
        "AGENT_HOME_SEED": str(tmp / "seed"),
    }
    if cli == "claude":
        env |= {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "sk-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        (tmp / "seed").mkdir(parents=True)
        settings |= {"AGENT_ADAPTER": "claude-code", "CLAUDE_BIN": str(TEE)}
    elif cli == "codex":
        write_codex_home(tmp / "seed" / ".codex", url)
        env |= {API_KEY_ENV: "sk-test"}
        settings |= {"AGENT_ADAPTER": "codex", "CODEX_BIN": str(TEE)}
    else:
        write_gemini_home(tmp / "seed")
        env |= {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "sk-test"}
        settings |= {"AGENT_ADAPTER": "gemini", "GEMINI_BIN": str(TEE)}
    return {**settings, "AGENT_ENV": json.dumps(env)}


@pytest.fixture(scope="module")
async def serve(fakes: dict[str, str], tmp_path_factory: Any) -> AsyncIterator[Serve]:
    """`await serve(cli, force=...)`: a server for the CLI (`claude`, `codex`, `gemini`, `cursor`,
    `ndjson`), started once per module and setting."""
    started: dict[tuple[str, bool], Served] = {}

    async def get(cli: str, force: bool = True) -> Served:
        if (cli, force) in started:
            return started[(cli, force)]
        tmp = tmp_path_factory.mktemp(f"usage-{cli}-{'force' if force else 'approvals'}")
        prices = tmp / "prices.json"
        prices.write_text(json.dumps(PRICES))
        if cli == "cursor":
            env = {
                "AGENT_ADAPTER": "cursor",
                "CURSOR_BIN": str(TEE),
                "AGENT_ENV": json.dumps({"TEE_CLI_BIN": str(FAKES / "cursor_agent.py")}),
                "AGENT_SANDBOX_READ": str(FAKES),
            }
        elif cli == "ndjson":
            command = f"{TEE} {PYTHON} {FAKES / 'ndjson_agent.py'}"
            env = {"AGENT_ADAPTER": "ndjson", "AGENT_COMMAND": command, "AGENT_SANDBOX_READ": str(FAKES)}
        else:
            env = _cli_env(cli, fakes[cli], tmp)
        settings = {
            "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
            "AGENT_FORCE": str(force).lower(),
            "CANCEL_GRACE_S": "2",
            "PRICE_TABLE_FILE": str(prices),
            **env,
        }
        server = await make_server("sqlite", tmp, **settings)
        client = httpx.AsyncClient(base_url=server.base_url, timeout=60)
        started[(cli, force)] = Served(server, client, tmp)
        return started[(cli, force)]

    yield get
    for served in started.values():
        await served.client.aclose()
        served.server.stop()


async def run(served: Served, text: str, **fields: Any) -> dict:
    return await wait_until_stopped(served.client, await send_message(served.client, text, **fields), 120)


async def answer(served: Served, task: dict, text: str = "y") -> dict:
    assert task["status"]["state"] == "input-required", status_text(task)
    return await run(served, text, taskId=task["id"], contextId=task["contextId"])


async def sdk_usage(served: Served, task_id: str) -> dict[str, dict[str, Any]]:
    """The task's metadata `usage` as the official client reads it, speaking v1.0 and v0.3."""
    out = {}
    for protocol in ("1.0", "0.3"):
        async with httpx.AsyncClient(timeout=60) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
            if protocol == "1.0":
                client = await factory.create_from_url(served.server.base_url)
            else:
                card = await A2ACardResolver(http, served.server.base_url).get_agent_card()
                client = factory.create(only_v03(card))
            try:
                task = await client.get_task(GetTaskRequest(id=task_id))
            finally:
                await client.close()
        out[protocol] = json_format.MessageToDict(task.metadata)["usage"]
    return out


def model_figures(usage: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    """Each model's (input, output, cache read, cache write) in a task's usage."""
    return {
        m: (u["inputTokens"], u["outputTokens"], u["cacheReadTokens"], u["cacheWriteTokens"])
        for m, u in usage["models"].items()
    }


def completed(task: dict) -> dict:
    assert task["status"]["state"] == "completed", status_text(task)
    return task["metadata"]["usage"]


def result_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The last `result` line: how Claude Code and Gemini CLI end a headless run, with its usage."""
    return next(line for line in reversed(lines) if line.get("type") == "result")


def has_result(lines: list[dict[str, Any]]) -> bool:
    return any(line.get("type") == "result" for line in lines)


# ---- Claude Code -----------------------------------------------------------------------------------


def claude_models(result: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {
        m: (u["inputTokens"], u["outputTokens"], u["cacheReadInputTokens"], u["cacheCreationInputTokens"])
        for m, u in result["modelUsage"].items()
    }


async def test_claude_records_what_its_result_line_reports(serve: Serve) -> None:
    claude = await serve("claude")
    task = await run(claude, "RUN: echo used > used.txt")
    usage = completed(task)
    result = result_line(await claude.printed_after(task, 0, has_result))
    assert model_figures(usage) == claude_models(result)
    assert usage["costUsd"] == pytest.approx(result["total_cost_usd"])
    assert {m: u["costSource"] for m, u in usage["models"].items()} == dict.fromkeys(
        result["modelUsage"], "reported"
    )
    assert usage["turns"] == result["num_turns"] == 2
    tool_uses = [
        block
        for line in claude.printed(task)
        if line.get("type") == "assistant" and not line.get("parent_tool_use_id")
        for block in line["message"]["content"]
        if block.get("type") == "tool_use"
    ]
    assert usage["toolCalls"] == len(tool_uses) == 1
    assert usage["reports"] == 1
    assert (await sdk_usage(claude, task["id"])) == {"1.0": usage, "0.3": usage}

    # The next turn resumes the session: Claude reports that process's use only; the context sums both.
    before = len(claude.printed(task))
    again = await run(claude, "say hi", contextId=task["contextId"])
    second = result_line(await claude.printed_after(again, before, has_result))
    assert model_figures(completed(again)) == claude_models(second)
    context = await claude.usage(by="context", contextId=task["contextId"])
    assert context["total"]["inputTokens"] == sum(
        u[0] for r in (result, second) for u in claude_models(r).values()
    )
    assert context["total"]["cacheReadTokens"] == sum(
        u[2] for r in (result, second) for u in claude_models(r).values()
    )
    assert context["total"]["costUsd"] == pytest.approx(result["total_cost_usd"] + second["total_cost_usd"])
    assert context["total"]["reports"] == 2


async def test_claude_asking_for_approval_is_one_report_of_the_whole_run(serve: Serve) -> None:
    claude = await serve("claude", force=False)
    asked = await run(claude, "RUN: echo approved > approved.txt")
    assert "usage" not in (asked.get("metadata") or {}), "nothing is reported before the run ends"
    done = await answer(claude, asked)
    usage = completed(done)
    result = result_line(await claude.printed_after(done, 0, has_result))
    assert model_figures(usage) == claude_models(result)
    assert usage["costUsd"] == pytest.approx(result["total_cost_usd"])
    assert (usage["reports"], usage["turns"], usage["toolCalls"]) == (1, result["num_turns"], 1)
    assert (await sdk_usage(claude, done["id"]))["0.3"] == usage


# ---- Codex -------------------------------------------------------------------------------------------


def turn_completed(lines: list[dict[str, Any]]) -> dict[str, int]:
    return next(line["usage"] for line in reversed(lines) if line.get("type") == "turn.completed")


def has_turn_completed(lines: list[dict[str, Any]]) -> bool:
    return any(line.get("type") == "turn.completed" for line in lines)


def codex_figures(u: dict[str, int]) -> tuple[int, int, int, int]:
    """Codex's counts as the server's: its input tokens include the cached and cache-write ones."""
    cached, written = u["cached_input_tokens"], u["cache_write_input_tokens"]
    return (u["input_tokens"] - cached - written, u["output_tokens"], cached, written)


async def test_codex_records_each_turns_share_of_the_threads_total(serve: Serve) -> None:
    codex = await serve("codex")
    task = await run(codex, "FAKE:tool:used.txt")
    usage = completed(task)
    printed = await codex.printed_after(task, 0, has_turn_completed)
    first = turn_completed(printed)
    assert model_figures(usage) == {"gpt-fake": codex_figures(first)}
    tokens_in, tokens_out, cached, _ = codex_figures(first)
    assert usage["costUsd"] == pytest.approx(cost("gpt-fake", tokens_in, tokens_out, cached))
    assert usage["models"]["gpt-fake"]["costSource"] == "price-table"
    started = [line for line in printed if line.get("type") == "item.started"]
    assert usage["toolCalls"] == len(started) == 1
    assert (await sdk_usage(codex, task["id"])) == {"1.0": usage, "0.3": usage}

    # The resumed thread's turn.completed counts the first turn again: the task records the difference.
    before = len(codex.printed(task))
    again = await run(codex, "say hi", contextId=task["contextId"])
    total = turn_completed(await codex.printed_after(again, before, has_turn_completed))
    assert total["input_tokens"] > first["input_tokens"], "Codex reports the thread's total"
    share = {k: total[k] - first[k] for k in first}
    assert model_figures(completed(again)) == {"gpt-fake": codex_figures(share)}
    context = await codex.usage(by="context", contextId=task["contextId"])
    assert context["total"]["inputTokens"] + context["total"]["cacheReadTokens"] == total["input_tokens"]
    assert context["total"]["outputTokens"] == total["output_tokens"]


async def test_codex_app_server_approval_is_one_report_of_the_turn(serve: Serve) -> None:
    codex = await serve("codex", force=False)
    asked = await run(codex, "FAKE:tool:approved.txt")
    done = await answer(codex, asked)
    usage = completed(done)

    def updates(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [line["params"] for line in lines if line.get("method") == "thread/tokenUsage/updated"]

    printed = await codex.printed_after(
        done, 0, lambda ls: any(x.get("method") == "turn/completed" for x in ls)
    )
    total = updates(printed)[-1]["tokenUsage"]["total"]
    cached, written = total["cachedInputTokens"], total["cacheWriteInputTokens"]
    expected = (total["inputTokens"] - cached - written, total["outputTokens"], cached, written)
    assert model_figures(usage) == {"gpt-fake": expected}, "a new thread: its total is the turn's"
    assert (usage["reports"], usage["toolCalls"]) == (1, 1)
    assert (await sdk_usage(codex, done["id"]))["1.0"] == usage


# ---- Gemini CLI --------------------------------------------------------------------------------------


def gemini_stats(lines: list[dict[str, Any]]) -> dict[str, Any]:
    return result_line(lines)["stats"]


def gemini_models(stats: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {m: (u["input"], u["output_tokens"], u["cached"], 0) for m, u in stats["models"].items()}


async def test_gemini_records_what_its_result_stats_report(serve: Serve) -> None:
    gemini = await serve("gemini")
    task = await run(gemini, "FAKE:tool:used.txt")
    usage = completed(task)
    stats = gemini_stats(await gemini.printed_after(task, 0, has_result))
    assert model_figures(usage) == gemini_models(stats)
    assert usage["inputTokens"] + usage["cacheReadTokens"] == stats["input_tokens"]
    assert usage["toolCalls"] == stats["tool_calls"] == 1
    tokens_in, tokens_out, cached, _ = gemini_models(stats)["fake-gemini"]
    assert usage["costUsd"] == pytest.approx(cost("fake-gemini", tokens_in, tokens_out, cached))
    assert (await sdk_usage(gemini, task["id"])) == {"1.0": usage, "0.3": usage}

    before = len(gemini.printed(task))
    again = await run(gemini, "say hi", contextId=task["contextId"])
    second = gemini_stats(await gemini.printed_after(again, before, has_result))
    assert model_figures(completed(again)) == gemini_models(second), "each invocation reports its own"
    context = await gemini.usage(by="model", contextId=task["contextId"])
    assert context["total"]["outputTokens"] == stats["output_tokens"] + second["output_tokens"]


async def test_gemini_acp_approval_is_one_report_of_the_prompt(serve: Serve) -> None:
    gemini = await serve("gemini", force=False)
    asked = await run(gemini, "FAKE:tool:approved.txt")
    done = await answer(gemini, asked)
    usage = completed(done)

    def quota(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
        for line in lines:
            meta = (line.get("result") or {}).get("_meta") if isinstance(line.get("result"), dict) else None
            if meta and "quota" in meta:
                return meta["quota"]
        return None

    printed = await gemini.printed_after(done, 0, lambda lines: quota(lines) is not None)
    reported = quota(printed)
    assert reported is not None
    expected: dict[str, list[int]] = {}
    for entry in reported["model_usage"]:
        figures = expected.setdefault(entry["model"], [0, 0, 0, 0])
        figures[0] += entry["token_count"]["input_tokens"]
        figures[1] += entry["token_count"]["output_tokens"]
    assert model_figures(usage) == {m: tuple(f) for m, f in expected.items()}
    assert usage["inputTokens"] == reported["token_count"]["input_tokens"]
    assert (usage["reports"], usage["toolCalls"]) == (1, 1)
    assert (await sdk_usage(gemini, done["id"]))["0.3"] == usage


# ---- cursor and ndjson (fake commands) --------------------------------------------------------------


async def test_cursor_reports_no_tokens_but_its_tool_call_and_time(serve: Serve) -> None:
    cursor = await serve("cursor")
    task = await run(cursor, "SHELL: echo from-cursor > c.txt")
    usage = completed(task)
    printed = await cursor.printed_after(task, 0, lambda lines: any(x.get("type") == "result" for x in lines))
    result = next(line for line in printed if line.get("type") == "result")
    assert "usage" not in result, "the documented result line carries no tokens"
    assert (usage["reports"], usage["models"], usage["inputTokens"], usage["costUsd"]) == (1, {}, 0, None)
    assert usage["toolCalls"] == 1 and usage["wallMs"] >= 0
    assert (await sdk_usage(cursor, task["id"]))["1.0"] == usage


async def test_ndjson_reports_before_asking_and_at_the_end_and_the_task_sums_both(serve: Serve) -> None:
    ndjson = await serve("ndjson")
    asked = await run(ndjson, "ASK")
    first = asked["metadata"]["usage"]
    assert first["reports"] == 1
    done = await answer(ndjson, asked, "yes")
    usage = completed(done)
    printed = await ndjson.printed_after(done, 0, lambda lines: any(x.get("kind") == "done" for x in lines))
    reports = [line["usage"] for line in printed if "usage" in line]
    assert len(reports) == 2
    assert usage["reports"] == 2
    assert usage["inputTokens"] == sum(r["input_tokens"] for r in reports)
    assert usage["outputTokens"] == sum(r["output_tokens"] for r in reports)
    assert usage["cacheReadTokens"] == sum(r.get("cache_read_tokens", 0) for r in reports)
    priced = cost("fake-ndjson", reports[0]["input_tokens"], reports[0]["output_tokens"])
    assert first["costUsd"] == pytest.approx(priced)
    assert usage["costUsd"] == pytest.approx(priced + reports[1]["cost_usd"])
    assert usage["models"]["fake-ndjson"]["costSource"] == "mixed"
    assert usage["turns"] == reports[1]["turns"]
    assert (await sdk_usage(ndjson, done["id"])) == {"1.0": usage, "0.3": usage}
    day = await ndjson.usage(by="day")
    assert day["total"]["inputTokens"] >= usage["inputTokens"]
