"""The `cursor` and `ndjson` adapters behind the A2A API, each running a fake executable
(tests/support/fakes/) that prints the documented lines, in a real server process (SQLite)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agents.cli.ndjson import NdjsonAgent
from app.agents.jail.sandbox import principal_key
from app.agents.options import AgentOptions
from app.api.edge.auth import ANONYMOUS
from tests.conftest import make_server
from tests.support.clis import (
    FAKES,
    alive,
    find_process,
    response_text,
    send_message,
    status_text,
    wait_for_process,
    wait_until_stopped,
)
from tests.support.rpc import result, text_message
from tests.support.server import ServerProcess

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
"""The system's python: a jailed fake sees /usr, not the test's virtualenv."""
NDJSON = shlex.join([PYTHON, str(FAKES / "ndjson_agent.py")])


class Served:
    def __init__(self, client: httpx.AsyncClient, root: Path) -> None:
        self.client, self.root = client, root

    def workspace(self, task: dict) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / task["contextId"]


async def _serve(tmp: Path, **env: str) -> AsyncIterator[Served]:
    env = {
        "AGENT_WORKSPACE_ROOT": str(tmp / "ws"),
        "CANCEL_GRACE_S": "2",
        "AGENT_SANDBOX_READ": str(FAKES),
        **env,
    }
    server = await make_server("sqlite", tmp, **env)
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            yield Served(client, tmp)
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def cursor(tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("cursor")
    async for served in _serve(tmp, AGENT_ADAPTER="cursor", CURSOR_BIN=str(FAKES / "cursor_agent.py")):
        yield served


@pytest.fixture(scope="module")
async def ndjson(tmp_path_factory: Any) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("ndjson")
    models = {"AGENT_MODEL": "fake-ndjson", "AGENT_MODELS": "fake-ndjson-small"}
    async for served in _serve(tmp, AGENT_ADAPTER="ndjson", AGENT_COMMAND=NDJSON, **models):
        yield served


async def _run(served: Served, text: str, **fields: Any) -> dict:
    return await wait_until_stopped(served.client, await send_message(served.client, text, **fields))


# ---- cursor ---------------------------------------------------------------------------------------


async def test_cursor_runs_unattended_with_the_prompt_as_argument(cursor: Served) -> None:
    task = await _run(cursor, "SHELL: echo from-cursor > c.txt")
    assert task["status"]["state"] == "completed", status_text(task)
    ws = cursor.workspace(task)
    assert (ws / "c.txt").read_text().strip() == "from-cursor"
    argv = json.loads((ws / "argv.json").read_text())
    assert argv == ["-p", "--output-format", "stream-json", "--force", "SHELL: echo from-cursor > c.txt"]
    assert response_text(task) == "Listing the directory. All done."
    summary = next(a for a in task["artifacts"] if a.get("name") == "result")["parts"][0]["data"]
    assert summary["summary"] == "Listing the directory. All done."


async def test_a_file_attached_without_a_repository_reaches_the_workspace_and_the_prompt_names_it(
    cursor: Served,
) -> None:
    message = text_message("Read the notes")
    message["parts"].append(
        {"kind": "file", "file": {"bytes": base64.b64encode(b"remember this").decode(), "name": "notes.txt"}}
    )
    sent = await result(
        cursor.client, "message/send", {"message": message, "configuration": {"blocking": True}}
    )
    task = await wait_until_stopped(cursor.client, sent)
    assert task["status"]["state"] == "completed", status_text(task)
    ws = cursor.workspace(task)
    assert (ws / "attachments" / "notes.txt").read_bytes() == b"remember this"
    prompt = json.loads((ws / "argv.json").read_text())[-1]
    assert prompt.startswith("Read the notes\n\n") and "- attachments/notes.txt" in prompt
    assert not any(a.get("name") == "changes" for a in task["artifacts"]), (
        "no repository, no change artifacts"
    )


async def test_cursor_next_turn_resumes_its_session(cursor: Served) -> None:
    first = await _run(cursor, "hello")
    second = await _run(cursor, "again", contextId=first["contextId"])
    assert second["status"]["state"] == "completed"
    argv = json.loads((cursor.workspace(second) / "argv.json").read_text())
    assert argv[-3:] == ["--resume", "0b6c1d9e-1111-4222-8333-444455556666", "again"]


async def test_cursor_failure_without_result_fails_with_stderr(cursor: Served) -> None:
    task = await _run(cursor, "FAIL")
    assert task["status"]["state"] == "failed"
    assert (
        status_text(task)
        == "cursor_agent.py exited with status 2: Error: fake cursor could not reach the model"
    )


# ---- ndjson ---------------------------------------------------------------------------------------


async def test_ndjson_events_become_the_task(ndjson: Served) -> None:
    task = await _run(ndjson, "hello")
    assert task["status"]["state"] == "completed", status_text(task)
    assert response_text(task) == f"hello from {ndjson.workspace(task)}"
    assert task["metadata"]["session"] == {"model": "fake-ndjson", "sessionId": "s-" + task["contextId"]}
    assert [a.get("name") for a in task["artifacts"]] == ["assistant-response", "result"]
    summary = next(a for a in task["artifacts"] if a.get("name") == "result")["parts"][0]["data"]
    assert summary == {"summary": "fake finished", "stats": {"files": 0}}


async def test_ndjson_command_gets_the_model_the_task_chose_in_its_prompt(ndjson: Served) -> None:
    task = await _run(ndjson, "hello", metadata={"model": "fake-ndjson-small"})
    assert task["status"]["state"] == "completed", status_text(task)
    assert task["metadata"]["session"]["model"] == "fake-ndjson-small", "the command read it from its prompt"


async def test_ndjson_approval_round_trip_over_stdin(ndjson: Served) -> None:
    task = await _run(ndjson, "ASK")
    assert task["status"]["state"] == "input-required"
    assert status_text(task) == "Run make clean?"
    done = await _run(ndjson, "yes", taskId=task["id"], contextId=task["contextId"])
    assert done["status"]["state"] == "completed"
    assert response_text(done) == "approved=True text=yes"


async def test_ndjson_long_line_arrives_whole(ndjson: Served) -> None:
    task = await _run(ndjson, "BIG")
    assert task["status"]["state"] == "completed"
    assert response_text(task) == "x" * 2_000_000


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        ("CRASH", "exited with status 3: Traceback: something broke in the fake agent"),
        ("SILENT", "exited without a result"),
    ],
)
async def test_ndjson_exit_without_done_fails_with_the_reason(
    ndjson: Served, prompt: str, reason: str
) -> None:
    task = await _run(ndjson, prompt)
    assert task["status"]["state"] == "failed"
    assert status_text(task) == f"{Path(PYTHON).name} {reason}"


async def jailed_ndjson(tmp_path: Path, **env: str) -> ServerProcess:
    """A SQLite server running the ndjson fake in the jail (the default), its workspaces under `tmp_path`."""
    return await make_server(
        "sqlite",
        tmp_path,
        AGENT_ADAPTER="ndjson",
        AGENT_COMMAND=NDJSON,
        AGENT_SANDBOX_READ=str(FAKES),
        AGENT_WORKSPACE_ROOT=str(tmp_path / "ws"),
        **env,
    )


def sleep_marker() -> str:
    """A `sleep` command line no other process on the host has: what `SLEEP <n>` makes the fake run."""
    return f"sleep 300.{uuid.uuid4().int % 10_000_000:07d}"


async def test_ndjson_cancel_stops_the_command_and_its_children(ndjson: Served) -> None:
    marker = sleep_marker()
    task = await send_message(ndjson.client, f"SLEEP {marker.split()[1]}", blocking=False)
    sleeper = await wait_for_process(marker)
    canceled = await result(ndjson.client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    assert not alive(sleeper) and find_process(marker) is None


KILLS = int(os.environ.get("RUNS_ONCE_KILLS", "3"))
"""Kills of the runs-once test in `make test`; `RUNS_ONCE_KILLS=50` for the long form."""


async def test_cli_left_by_a_killed_server_is_killed_at_its_next_start_and_never_run_again(
    tmp_path: Path,
) -> None:
    """Without the jail, SIGKILL gives the server no chance to stop its CLIs; its next start (same
    replica) kills them, and the task they worked for ends failed as lost. Killed as soon as the CLI has
    started, before the run's first event is committed: the task was `submitted` with its run started
    (`run_started_at`), so the next life never runs it again (it did, on a busy machine: a second CLI
    for the same task). Each round: one run of the CLI, the task failed, no CLI left."""
    server = await make_server(
        "sqlite",
        tmp_path,
        AGENT_ADAPTER="ndjson",
        AGENT_COMMAND=NDJSON,
        AGENT_SANDBOX="none",
        AGENT_WORKSPACE_ROOT=str(tmp_path / "ws"),
        REPLICA_ID=f"reaper-{uuid.uuid4().hex[:8]}",
    )
    try:
        for kill in range(KILLS):
            marker = sleep_marker()
            async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
                task = await send_message(client, f"SLEEP {marker.split()[1]}", blocking=False)
                sleeper = await wait_for_process(marker)
                server.kill()
                assert alive(sleeper), "the killed server's CLI outlived it (what the next start must fix)"
                server.start()
                async with asyncio.timeout(60):
                    while (after := await result(client, "tasks/get", {"id": task["id"]}))["status"][
                        "state"
                    ] != "failed":
                        assert after["status"]["state"] in ("submitted", "working"), after["status"]
                        await asyncio.sleep(0.05)
                    while alive(sleeper) or find_process(marker) is not None:
                        await asyncio.sleep(0.05)
            assert "restarted" in status_text(after), after["status"]
            states = [t["state"] for t in after["metadata"]["stateTransitions"]]
            assert states in (["submitted", "failed"], ["submitted", "working", "failed"]), (kill, states)
    finally:
        server.stop()


async def test_a_deployment_reusing_a_replica_id_never_kills_anothers_cli(tmp_path: Path) -> None:
    """Two deployments on one host, each its own database, whose replicas share a REPLICA_ID (`a2a-1` in
    both, as two test clusters had): the second's start, and its restart after a SIGKILL, kill nothing of
    the first's, whose run goes on. Each start reaps only what its own previous life left."""
    common = {
        "AGENT_ADAPTER": "ndjson",
        "AGENT_COMMAND": NDJSON,
        "AGENT_SANDBOX": "none",
        "REPLICA_ID": f"a2a-{uuid.uuid4().hex[:8]}",
    }
    first = await make_server(
        "sqlite", tmp_path / "one", AGENT_WORKSPACE_ROOT=str(tmp_path / "one" / "ws"), **common
    )
    try:
        marker = sleep_marker()
        async with httpx.AsyncClient(base_url=first.base_url, timeout=60) as client:
            task = await send_message(client, f"SLEEP {marker.split()[1]}", blocking=False)
            sleeper = await wait_for_process(marker)
            # Ready means started: its agents' setup, the reaping included, ran before /readyz said so.
            second = await make_server(
                "sqlite", tmp_path / "two", AGENT_WORKSPACE_ROOT=str(tmp_path / "two" / "ws"), **common
            )
            try:
                second.kill()
                second.start()
            finally:
                second.stop()
            assert alive(sleeper), "the other deployment's start killed this one's CLI as its orphan"
            after = await result(client, "tasks/get", {"id": task["id"]})
            assert after["status"]["state"] in ("submitted", "working"), after["status"]
    finally:
        first.stop()


async def test_a_jailed_cli_dies_with_its_killed_server(tmp_path: Path) -> None:
    """In the jail (the default) a SIGKILLed server's CLIs end at once: bwrap dies with its parent and
    takes the jail's whole pid namespace with it."""
    server = await jailed_ndjson(tmp_path)
    marker = sleep_marker()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            await send_message(client, f"SLEEP {marker.split()[1]}", blocking=False)
            sleeper = await wait_for_process(marker)
            server.kill()
            async with asyncio.timeout(30):
                while alive(sleeper) or find_process(marker) is not None:
                    await asyncio.sleep(0.05)
    finally:
        server.stop()


def bound_from_the_host(context_id: str) -> dict[str, Path]:
    """What a live jailed run of `context_id` was shown from the host, by where its bwrap binds it: the
    egress socket and the tool folder."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if argv[0].endswith("bwrap") and any(context_id in a for a in argv):
            at = {inside: argv.index(inside) - 1 for inside in ("/run/a2a/egress.sock", "/run/a2a/tools")}
            return {inside: Path(argv[i]) for inside, i in at.items() if i >= 0}
    return {}


async def test_a_killed_servers_socket_folders_are_removed_at_its_next_start(tmp_path: Path) -> None:
    """The egress proxy's folder and a run's tool folder (`jail/scratch.py`) outlive a SIGKILLed server,
    which never removes them; its next start does. Under a TMPDIR of the test's own, so it sees and sweeps
    nobody else's: a short one (pytest's folder in an xdist worker is too long for a socket's path, and the
    folders would go to /tmp, `scratch.LONGEST_ROOT`)."""
    tmp = Path(tempfile.mkdtemp(prefix="a2a-t-", dir="/tmp"))
    server = await jailed_ndjson(tmp_path, REPLICA_ID=f"scratch-{uuid.uuid4().hex[:8]}", TMPDIR=str(tmp))
    marker = sleep_marker()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            task = await send_message(client, f"SLEEP {marker.split()[1]}", blocking=False)
            try:
                await wait_for_process(marker)
            except TimeoutError:
                got = await client.post(
                    "/a2a/jsonrpc",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task["id"]}},
                )
                raise AssertionError(
                    f"no CLI run within 60 s; the task: {got.text[:1500]}\n"
                    f"folders: {sorted(p.name for p in tmp.iterdir())}\n{server.log_tail()}"
                ) from None
            shown = bound_from_the_host(task["contextId"])
            egress, tools = shown["/run/a2a/egress.sock"].parent, shown["/run/a2a/tools"].parent
            assert egress.parent == tmp and egress.name.startswith("a2a-egress-"), shown
            assert tools.parent == tmp and tools.name.startswith("a2a-tools-"), shown
            left = {egress, tools}
            assert set(tmp.glob("a2a-*")) == left
            server.kill()
            assert all(p.is_dir() for p in left), "the killed server removed them (nothing left to test)"
            server.start()
            try:
                async with asyncio.timeout(60):
                    while any(os.path.lexists(p) for p in left):
                        await asyncio.sleep(0.1)
            except TimeoutError:
                kept = sorted(p.name for p in left if os.path.lexists(p))
                raise AssertionError(f"the next start left {kept}\n{server.log_tail()}") from None
            [live] = tmp.glob("a2a-egress-*")  # the new life's proxy, its owner alive: kept
            assert live not in left
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_ndjson_needs_a_command() -> None:
    with pytest.raises(ValueError, match="AGENT_COMMAND"):
        NdjsonAgent(AgentOptions(command="  "))
