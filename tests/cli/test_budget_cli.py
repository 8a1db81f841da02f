"""A task's budget stops a real CLI process: the fake `ndjson` agent (tests/support/fakes/ndjson_agent.py,
`SPEND`) reports 0.02 USD a turn and starts a `sleep` child; against a 0.05 cap (`metadata.budgetUsd`, below
its role's `budget_usd` of 1) the task fails at the third report, its status naming the budget and the
spend, and the command and its child are gone. One server process (SQLite), the command in its jail. The
refusals of a cap above the role's, on every binding: tests/e2e/test_task_options.py; the day's cap and
children: tests/e2e/test_budgets.py.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import make_server
from tests.support.clis import (
    FAKES,
    find_process,
    response_text,
    send_message,
    status_text,
    wait_until_stopped,
)

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
"""The system's python: a jailed fake sees /usr, not the test's virtualenv."""
NDJSON = shlex.join([PYTHON, str(FAKES / "ndjson_agent.py")])


@pytest.fixture(scope="module")
async def spender(tmp_path_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    tmp = tmp_path_factory.mktemp("budget-cli")
    agents = {"spender": {"adapter": "ndjson", "command": NDJSON, "budget_usd": 1}}
    server = await make_server(
        "sqlite",
        tmp,
        AGENTS=json.dumps(agents),
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        AGENT_SANDBOX_READ=str(FAKES),
        CANCEL_GRACE_S="2",
    )
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield client
    finally:
        server.stop()


async def test_a_run_past_its_budget_fails_at_that_report_and_its_process_tree_is_gone(
    spender: httpx.AsyncClient,
) -> None:
    marker = f"300.{uuid.uuid4().int % 10_000_000:07d}"
    task = await send_message(spender, f"SPEND 0.02 {marker}", blocking=False, metadata={"budgetUsd": 0.05})
    task = await wait_until_stopped(spender, task)
    assert task["status"]["state"] == "failed", status_text(task)
    text = status_text(task)
    assert "budget of $0.05" in text and "spent $0.06" in text, text
    usage = task["metadata"]["usage"]
    assert usage["reports"] == 3, "the third report of 0.02 passed the 0.05 cap; none after it counts"
    assert usage["costUsd"] == pytest.approx(0.06)
    assert task["metadata"]["budgetUsd"] == 0.05
    assert response_text(task).startswith("started sleep "), "the command started its child"
    assert await _gone(marker), "the command or its child outlived the budget's stop"


async def test_a_task_that_asks_no_budget_keeps_its_roles(spender: httpx.AsyncClient) -> None:
    task = await wait_until_stopped(spender, await send_message(spender, "hello"))
    assert task["status"]["state"] == "completed", status_text(task)
    assert task["metadata"]["budgetUsd"] == 1


async def _gone(marker: str, within_s: float = 30) -> bool:
    """Whether every process whose command line holds `marker` (the command's `SPEND ... <marker>`, its
    `sleep <marker>`) ends within `within_s` (the stop follows the task's end)."""
    try:
        async with asyncio.timeout(within_s):
            while find_process(marker) is not None:
                await asyncio.sleep(0.05)
    except TimeoutError:
        return False
    return True
