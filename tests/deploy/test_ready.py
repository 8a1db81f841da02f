"""scripts/ready.py, which starts every server bench/, scripts/ and tests/ run: it returns once the process is
ready, and a failure says which process, why, and what its log ended with."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from scripts.ready import spawn, start, wait_ready

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/readyz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ready_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _unused_url() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}/readyz"


def test_returns_once_the_url_answers_200(tmp_path: Path, ready_url: str) -> None:
    proc = spawn(SLEEPER, tmp_path / "p.log")
    try:
        wait_ready(proc, ready_url + "/readyz", "sleeper", [tmp_path / "p.log"], timeout_s=30)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_an_exit_fails_at_once_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    cmd = [sys.executable, "-c", "print('no database here', flush=True); raise SystemExit(3)"]
    with pytest.raises(RuntimeError) as err:
        start(cmd, _unused_url(), "the server", log, timeout_s=60)
    assert "the server exited (code 3)" in str(err.value)
    assert f"{log}:\nno database here" in str(err.value)


def test_not_ready_in_time_is_killed_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    log.write_text("an earlier start's last line\n")  # appended to, as a restarted server's log is
    proc = spawn(SLEEPER, log)
    with pytest.raises(RuntimeError) as err:
        wait_ready(proc, _unused_url(), "the sleeper", [log], timeout_s=2, kill=True)
    assert proc.poll() is not None
    assert "the sleeper not ready after 2s" in str(err.value) and "(killed)" in str(err.value)
    assert f"{log}:\nan earlier start's last line" in str(err.value)
