"""Helpers for the tests that run coding-agent CLIs: the pinned install, task polling, process checks."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.rpc import result, text_message
from tests.support.server import ROOT

CLI_BIN = ROOT / ".cache" / "cli" / "node_modules" / ".bin"
FAKES = Path(__file__).resolve().parent / "fakes"


def install_clis() -> None:
    """Run scripts/install-clis.sh (a no-op when the pinned versions are there); fails the tests if npm
    cannot install them: these tests are never skipped."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "install-clis.sh")], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"installing the CLIs failed:\n{done.stdout}\n{done.stderr}"


async def send_message(client: httpx.AsyncClient, text: str, blocking: bool = True, **fields: Any) -> dict:
    params: dict[str, Any] = {"message": text_message(text, **fields)}
    params["configuration"] = {"blocking": blocking}
    return await result(client, "message/send", params)


async def get_task(client: httpx.AsyncClient, task_id: str) -> dict:
    return await result(client, "tasks/get", {"id": task_id})


async def wait_until_stopped(client: httpx.AsyncClient, task: dict, within_s: float = 60) -> dict:
    """Poll until the task is terminal or waiting for input (a blocking send may return earlier)."""
    stop = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}
    async with asyncio.timeout(within_s):
        while task["status"]["state"] not in stop:
            await asyncio.sleep(0.1)
            task = await get_task(client, task["id"])
    return task


def status_text(task: dict) -> str:
    message = task["status"].get("message") or {}
    return " ".join(p.get("text", "") for p in message.get("parts", []))


def response_text(task: dict) -> str:
    return "".join(
        p.get("text", "")
        for a in task.get("artifacts", [])
        if a.get("name") == "assistant-response"
        for p in a["parts"]
    )


def history_texts(task: dict) -> list[str]:
    return [" ".join(p.get("text", "") for p in m["parts"]) for m in task.get("history", [])]


# ---- processes -------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has stopped working and does not count)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def find_process(marker: str) -> int | None:
    """The pid of a live process whose command line contains `marker`."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and alive(int(name)):
            return int(name)
    return None


async def wait_for_process(marker: str, within_s: float = 60) -> int:
    async with asyncio.timeout(within_s):
        while (pid := find_process(marker)) is None:
            await asyncio.sleep(0.05)
    return pid


def session_of(pid: int) -> int:
    st = _stat(pid)
    assert st is not None
    return int(st[3])


def session_members(sid: int) -> list[int]:
    """Live processes in the session `sid` (the CLI's, since it runs with start_new_session)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None and st[0] != "Z" and int(st[3]) == sid:
            out.append(int(name))
    return out


def working_in(path: Path) -> list[int]:
    """Live processes whose current directory is `path` or below (a CLI and its tools in a workspace)."""
    target = str(path.resolve())
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not alive(int(name)):
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + "/"):
            out.append(int(name))
    return out


def sessions_in(path: Path) -> set[int]:
    """The sessions of the live processes working in `path`: a CLI run's own (each starts one) and those its
    tools start; a process that ends meanwhile is left out, so a new one is a new process group's."""
    out = set()
    for pid in working_in(path):
        st = _stat(pid)
        if st is not None and st[0] != "Z":
            out.add(int(st[3]))
    return out


async def wait_none_working_in(path: Path, within_s: float = 60) -> list[int]:
    """Wait for the processes in `path` to end; what is still there afterwards (empty when none)."""
    try:
        async with asyncio.timeout(within_s):
            while working_in(path):
                await asyncio.sleep(0.05)
    except TimeoutError:
        pass
    return working_in(path)
