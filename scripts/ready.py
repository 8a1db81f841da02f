"""Starting a server process and waiting until it says it is ready: one way for bench/, scripts/ and tests/.

`start(cmd, url, name, log_path)` starts `cmd` with its output appended to `log_path` and returns once `url`
(its /readyz) answers 200; a process that exits first, or is not ready in time, fails with its log's tail and
is not left running. `spawn` and `wait_ready` are the two halves, for a caller that starts several processes
before it waits (the cluster's replicas), waits again after a fault, or ends a failed start its own way (the
cluster stops nginx's workers with it). Every wait polls the state, never a fixed sleep, within a generous
deadline.

Only the standard library, as in scripts/cluster.py, which builds on it.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

READY_TIMEOUT_S = 120.0
"""How long a process may take to answer ready: a cold start on a busy 2-core machine beside other test
workers. A wait on a state, so it costs nothing when all is well."""
PROBE_TIMEOUT_S = 5.0
"""One probe's own timeout: above the app's READY_TIMEOUT_S (3 s), so a slow but healthy /readyz counts."""
POLL_S = 0.05
TAIL_LINES = 40
"""How much of each log a failure shows."""


def http_status(url: str, timeout: float = 1.0) -> int | None:
    """The HTTP status of GET `url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, urllib.error.URLError):
        return None


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def tails(logs: Sequence[Path], lines: int = TAIL_LINES) -> str:
    """Each log's path and last lines, for a failure message."""
    return "\n".join(f"{path}:\n{log_tail(path, lines)}" for path in logs)


def spawn(
    cmd: Sequence[str],
    log_path: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `cmd` in `cwd` (None: this process's) with stdout and stderr appended to `log_path`;
    `new_session`: in a session of its own, so a signal to the caller's process group (Ctrl-C) misses it."""
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            list(cmd), cwd=cwd, env=env, stdout=log, stderr=log, start_new_session=new_session
        )


def wait_ready(
    proc: subprocess.Popen[bytes],
    url: str,
    name: str,
    logs: Sequence[Path],
    timeout_s: float = READY_TIMEOUT_S,
    *,
    kill: bool = False,
) -> None:
    """Poll `url` until it answers 200. If `proc` exits first, or `timeout_s` passes, RuntimeError naming
    `name`, with the tail of each of `logs`; `kill`: a process not ready in time is killed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited (code {proc.returncode}); {tails(logs)}")
        if http_status(url, PROBE_TIMEOUT_S) == 200:
            return
        time.sleep(POLL_S)
    if kill and proc.poll() is None:
        proc.kill()
        proc.wait()
    killed = " (killed)" if kill else ""
    raise RuntimeError(f"{name} not ready after {timeout_s:g}s at {url}{killed}; {tails(logs)}")


def start(
    cmd: Sequence[str],
    url: str,
    name: str,
    log_path: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = READY_TIMEOUT_S,
) -> subprocess.Popen[bytes]:
    """`spawn` then `wait_ready`: the process, once `url` answers 200; one not ready in time is killed."""
    proc = spawn(cmd, log_path, cwd=cwd, env=env)
    wait_ready(proc, url, name, [log_path], timeout_s, kill=True)
    return proc
