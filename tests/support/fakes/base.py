"""What the model-API fakes share: a threaded HTTP server on 127.0.0.1, a request log, SSE, scenarios.

A fake chooses its answer from the request body, never from a turn counter, so helper requests a CLI
makes (routers, retries) cannot shift the script. The scenario is named in the user's prompt:

- `FAKE:tool:<file>`  ask for a shell command that writes `<file>` in the workspace
- `FAKE:long:<n>`     ask for the shell command `exec sleep 300.<n>` (digits: a marker to find it by)
- `FAKE:error`        answer HTTP 400 with the message `ERROR_MESSAGE`
- `FAKE:hang`         accept the request (200, SSE headers) and then send nothing, until the fake closes
- `FAKE:loop:<m>`     ask for `sleep 1; echo <m>-<n>` again after every result (n counts): a CLI that
                      keeps working and printing, never finishing
- `FAKE:twice:<file>` ask for the shell command `echo hi >> <file>` twice, one call per answer (Codex's fake:
                      an approval asked twice)
- `FAKE:patch:<file>` ask for a file edit that creates `<file>` with `patched`: Codex's `apply_patch`
                      (through exec_command, which Codex turns into a file change), Gemini's write_file
- anything else       answer text (`TEXT_CHUNKS`, streamed in pieces)

Once a tool's output is in the history, the answer is the final text `Done: tool said <output>`
(except in the loop scenario).

`CALL: <tool> <json arguments>` lines (each on a line of its own) script calls of the run's MCP tools
(`app/agents/cli/tools.py`): one call per answer, in order, each of the tool the CLI offers under a name
ending in `a2a_<tool>` (`mcp__a2a__send_to_agent`, `mcp_a2a_send_to_agent`); `{taskId}` in the arguments is
the `taskId` of the previous call's result. Once every call has its result, the final text quotes the last
one whole (`call_final_text`).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT_CHUNKS = ("hi from ", "the fake ", "model")
TEXT = "".join(TEXT_CHUNKS)
ERROR_MESSAGE = "fake model refuses this request"
_DIRECTIVE = re.compile(r"FAKE:(tool|long|error|hang|loop|patch|twice)(?::([\w.\-]+))?")
HANG_LIMIT_S = 300.0
"""The longest a `hang` reply holds its connection (the fake's close ends it at once)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    kind: str  # "text", "tool", "long", "error", "hang", "loop", "patch" or "twice"
    file: str = ""
    step: int = 1
    """In the loop scenario, which call this is (1 for the first)."""

    def command(self) -> str:
        """The shell command the fake model asks the CLI to run."""
        if self.kind == "long":
            return f"exec sleep 300.{self.file}"
        if self.kind == "loop":
            # Distinct each time: Gemini stops a turn that repeats one tool call with the same input.
            return f"sleep 1; echo {self.file}-{self.step}"
        if self.kind == "patch":
            patch = f"*** Begin Patch\n*** Add File: {self.file}\n+patched\n*** End Patch"
            return f"apply_patch <<'PATCH'\n{patch}\nPATCH\n"
        if self.kind == "twice":
            return f"echo hi >> {self.file}"
        return f"echo hi > {self.file}"


def scenario_of(texts: list[str]) -> Scenario:
    """The scenario named in the texts of the latest user message (its last directive), else text.

    Only the latest message counts: a resumed session's history holds earlier turns' directives.
    """
    found = [m for text in texts for m in _DIRECTIVE.finditer(text)]
    if not found:
        return Scenario("text")
    return Scenario(found[-1].group(1), found[-1].group(2) or "")


_CALL = re.compile(r"^CALL: (\w+)(?: (.*))?$", re.MULTILINE)


def call_script(texts: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The `CALL:` lines of the texts: (tool, arguments) in order."""
    out = []
    for text in texts:
        for tool, raw in _CALL.findall(text):
            out.append((tool, json.loads(raw) if raw.strip() else {}))
    return out


def offered_tool(names: list[str], tool: str) -> str | None:
    """The name under which the CLI offers the run's MCP tool `tool`, if it does."""
    pattern = re.compile(rf"(^|_)a2a_+{re.escape(tool)}$")
    return next((n for n in names if pattern.search(n)), None)


def next_call(
    script: list[tuple[str, dict[str, Any]]], outputs: list[str]
) -> tuple[str, dict[str, Any]] | None:
    """The scripted call to make after `outputs` (the results so far), `{taskId}` filled in; None: done."""
    if len(outputs) >= len(script):
        return None
    tool, args = script[len(outputs)]
    task_id = ""
    if outputs:
        found = re.search(r'\\?"taskId\\?":\s*\\?"([^"\\]+)', outputs[-1])  # quoted, or in quoted JSON
        task_id = found.group(1) if found else ""
    return tool, json.loads(json.dumps(args).replace("{taskId}", task_id))


def call_final_text(tool_output: str) -> str:
    return f"Done: a2a said {tool_output.strip()[:4000]}"


def final_text(tool_output: str) -> str:
    return f"Done: tool said {tool_output.strip()[:120]!r}"


@dataclass(slots=True)
class Reply:
    """What the handler sends: `events` as SSE `data:` lines, else `body` as JSON."""

    status: int = 200
    body: Any = None
    events: list[dict[str, Any]] | None = None
    sse_event_names: bool = False
    hang: bool = False
    """Send the SSE headers, then nothing until the fake closes (a model API that stalls)."""


class FakeServer:
    """A stdlib HTTP server in a daemon thread; subclasses implement `reply(method, path, body)`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self._closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _handle(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                fake.requests.append((self.command, self.path, body))
                fake.send(self, fake.reply(self.command, self.path, body))

            do_GET = _handle
            do_POST = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def reply(self, method: str, path: str, body: Any) -> Reply:
        raise NotImplementedError

    def send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.events is None and not reply.hang:
            data = json.dumps(reply.body if reply.body is not None else {}).encode()
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        if reply.hang:
            self._closing.wait(HANG_LIMIT_S)
            handler.close_connection = True
            return
        for event in reply.events or ():
            name = f"event: {event['type']}\n" if reply.sse_event_names else ""
            handler.wfile.write(f"{name}data: {json.dumps(event)}\r\n\r\n".encode())
            handler.wfile.flush()
        handler.close_connection = True

    def join(self) -> None:
        """Serve until interrupted (running a fake alone, by hand)."""
        self._thread.join()

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
