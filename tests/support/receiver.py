"""A real webhook receiver for push tests: a threaded HTTP server on loopback that records every call.

Each path answers 200 unless scripted: `script("/p", 503, 503)` makes the next two calls to `/p` answer 503
(then 200 again); a status may come with headers, `(307, {"Location": ...})`. `hold()` keeps every call
waiting (the connection open, no answer) until `release()`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = int | tuple[int, dict[str, str]]


@dataclass(slots=True)
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class Receiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.calls: list[Received] = []
        self._scripts: dict[str, deque[Answer]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                receiver._open.wait()
                with receiver._lock:
                    receiver.calls.append(
                        Received(
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            json.loads(raw) if raw else None,
                        )
                    )
                    script = receiver._scripts[self.path]
                    answer = script.popleft() if script else 200
                status, headers = answer if isinstance(answer, tuple) else (answer, {})
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # the default 5 resets connections when many webhooks call at once

        self._server = Server((host, 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def script(self, path: str, *answers: Answer) -> None:
        with self._lock:
            self._scripts[path].extend(answers)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [c for c in self.calls if c.path == path]

    async def wait_for(self, check: Callable[[], bool], timeout: float = 60) -> None:
        """Poll `check` until it holds; fail the test after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.02)

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
