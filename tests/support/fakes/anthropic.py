"""A small fake of the Anthropic Messages API on 127.0.0.1, for running the real Claude Code CLI in tests.

It answers from the request body, not from a turn counter, so the CLI's retries or helper requests do not
confuse it. The last user message decides:

- it carries a `tool_result` → `Done: the tool succeeded.` or `Done: the tool failed: <content>`;
- `CALL: <tool> <json>` lines in the prompt (base.py) → the run's MCP tools (`mcp__a2a__<tool>`), one call per
  answer; then `Done: a2a said <the last result>`, or at a failed one `Done: the tool failed: <content>`;
- `RUN: <command>` in its text → a `Bash` tool call running that command (when tools are offered);
- `RUNS: <command> | <command> ...` in the prompt (when tools are offered) → one `Bash` call per answer, in
  order (the CLI asks for each); then `Done: the tool succeeded.`, or at a failed one `Done: the tool failed:
  <content>`;
- `PARALLEL: <command> | <command> ...` (when tools are offered) → every command a `Bash` call of one
  answer; once each has its result, `Done: <n> ran, <m> failed.`;
- `EDIT: <path> | <old> | <new>` and `WRITE: <path> | <text>` lines in the prompt (when tools are offered) →
  a script of file tools, one call per answer, in the prompt's order: `Read` then `Edit` (Claude edits only
  a file it has read), or `Write` of `<text>` and a newline; `<path>` is taken from the working directory
  the CLI's system prompt names. Once every call has its result: `Done: the tool succeeded.`, or at the
  first failed one `Done: the tool failed: <content>`;
- `HANG` → the response never starts (the CLI waits silently);
- `DRIP` → a text block that gets one delta every 0.3 s for a minute;
- `BADREQUEST` → HTTP 400 with an `invalid_request_error`;
- `RECALL` → text naming the first user prompt of the conversation (proves a resumed session);
- anything else → `hi from the fake model`, streamed in three deltas.

SSE as the CLI expects it (CLI-REAL-RUNS.md): message_start, per block content_block_start/delta/stop,
message_delta with stop_reason and usage, message_stop.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath
from typing import Any

from .base import call_final_text, call_script, next_call, offered_tool

TEXT_REPLY = ["hi from ", "the fake ", "model"]
USAGE = {
    "input_tokens": 12,
    "output_tokens": 7,
    "cache_read_input_tokens": 30,
    "cache_creation_input_tokens": 5,
}
"""What every answer says it used (cache reads and writes too, so a test sees each count carried through)."""


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]


def _tool_result(content: Any) -> dict[str, Any] | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return block
    return None


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(_texts(content))
    return str(content or "")


def _user_prompts(messages: list[dict[str, Any]]) -> list[str]:
    """The user's own prompts (not tool results, not the CLI's <system-reminder> blocks)."""
    out = []
    for m in messages:
        if m.get("role") == "user" and _tool_result(m.get("content")) is None:
            text = "\n".join(t for t in _texts(m.get("content")) if not t.startswith("<system-reminder>"))
            if text.strip():
                out.append(text.strip())
    return out


_FILE_STEP = re.compile(r"^(EDIT|WRITE): (.+)$", re.MULTILINE)
_WORKING_DIR = re.compile(r"Primary working directory: (\S+)")


def _working_dir(body: dict[str, Any]) -> str:
    """The CLI's working directory, as its system prompt names it ("" when it names none)."""
    system = body.get("system")
    found = _WORKING_DIR.search(system if isinstance(system, str) else "\n".join(_texts(system)))
    return found.group(1) if found else ""


def _file_script(prompt: str, cwd: str) -> list[dict[str, Any]]:
    """The file tool calls the `EDIT:`/`WRITE:` lines of `prompt` ask for, in order (module docstring)."""
    calls: list[dict[str, Any]] = []
    for kind, rest in _FILE_STEP.findall(prompt):
        fields = [f.strip() for f in rest.split(" | ")]
        path = str(PurePosixPath(cwd) / fields[0])
        if kind == "EDIT" and len(fields) == 3:
            calls.append({"name": "Read", "input": {"file_path": path}})
            edit = {"file_path": path, "old_string": fields[1], "new_string": fields[2]}
            calls.append({"name": "Edit", "input": edit})
        elif kind == "WRITE" and len(fields) == 2:
            calls.append({"name": "Write", "input": {"file_path": path, "content": fields[1] + "\n"}})
    for line in re.findall(r"^RUNS: (.+)$", prompt, re.MULTILINE):
        calls += [_bash(command.strip()) for command in line.split(" | ")]
    return calls


def _bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "input": {"command": command, "description": "run it"}}


_PARALLEL = re.compile(r"^PARALLEL: (.+)$", re.MULTILINE)


def _since_prompt(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The latest user prompt's text and the tool results that came after it."""
    results: list[dict[str, Any]] = []
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        if _tool_result(m.get("content")) is not None:
            blocks = [b for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
            results[:0] = blocks
        elif _user_prompts([m]):
            return "\n".join(_texts(m.get("content"))), results
    return "", results


class FakeAnthropic:
    """The server, in a daemon thread; `requests` records every Messages request body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "nothing"}})

            def do_HEAD(self) -> None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "?"}})
                    return
                fake.requests.append(body)
                fake._answer(self, body)

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-anthropic", daemon=True)

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def prompts(self) -> list[list[str]]:
        """Per recorded request, the user prompts it carried."""
        return [_user_prompts(r.get("messages", [])) for r in self.requests]

    # ---- answers ---------------------------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        # The CLI may append a `system`-role message after the user's; the last user message decides.
        last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        result = _tool_result(last.get("content"))
        prompt = "\n".join(_texts(last.get("content")))
        blocks: list[dict[str, Any]]
        asked, results = _since_prompt(messages)
        script = _file_script(asked, _working_dir(body)) if body.get("tools") else []
        if calls := call_script([asked]):
            blocks = self._mcp_step(body, calls, results)
        elif script and (failed := next((r for r in results if r.get("is_error")), None)) is not None:
            blocks = [{"type": "text", "text": f"Done: the tool failed: {_result_text(failed)}"}]
        elif len(results) < len(script):
            step = script[len(results)]
            blocks = [{"type": "text", "text": f"Using {step['name']}."}, {"type": "tool_use", **step}]
        elif (both := _PARALLEL.search(asked)) and body.get("tools"):
            if results:
                failed = sum(1 for r in results if r.get("is_error"))
                blocks = [{"type": "text", "text": f"Done: {len(results) - failed} ran, {failed} failed."}]
            else:
                runs = [{"type": "tool_use", **_bash(c.strip())} for c in both.group(1).split(" | ")]
                blocks = [{"type": "text", "text": "I'll run them."}, *runs]
        elif result is not None:
            text = (
                f"Done: the tool failed: {_result_text(result)}"
                if result.get("is_error")
                else "Done: the tool succeeded."
            )
            blocks = [{"type": "text", "text": text}]
        elif "HANG" in prompt:
            self._stop.wait(120)
            return
        elif "BADREQUEST" in prompt:
            h._json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "fake bad"}})  # type: ignore[attr-defined]
            return
        elif "DRIP" in prompt:
            self._drip(h, body)
            return
        elif (m := re.search(r"RUN: (.+)", prompt)) and body.get("tools"):
            command = m.group(1).strip()
            blocks = [
                {"type": "text", "text": "I'll run it."},
                {"type": "tool_use", "name": "Bash", "input": {"command": command, "description": "run it"}},
            ]
        elif "RECALL" in prompt:
            first = _user_prompts(messages)[0]
            blocks = [{"type": "text", "text": f"The first prompt was: {first}"}]
        else:
            blocks = [{"type": "text", "text": "".join(TEXT_REPLY), "parts": TEXT_REPLY}]
        if body.get("stream"):
            self._stream(h, body, blocks)
        else:
            content = [{k: v for k, v in b.items() if k != "parts"} for b in blocks]
            for b in content:
                if b["type"] == "tool_use":
                    b["id"] = f"toolu_{uuid.uuid4().hex[:20]}"
            stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
            h._json(200, {**self._message(body), "content": content, "stop_reason": stop})  # type: ignore[attr-defined]

    @staticmethod
    def _mcp_step(
        body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]], results: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The next scripted MCP tool call, or the final text once each has its result (module docstring)."""
        outputs = [_result_text(r) for r in results]
        if results and results[-1].get("is_error"):
            return [{"type": "text", "text": f"Done: the tool failed: {outputs[-1]}"}]
        step = next_call(calls, outputs)
        if step is None:
            return [{"type": "text", "text": call_final_text(outputs[-1] if outputs else "")}]
        offered = [str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict)]
        name = offered_tool(offered, step[0])
        if name is None:
            return [{"type": "text", "text": f"No tool a2a {step[0]} is offered"}]
        return [
            {"type": "text", "text": f"Calling {name}."},
            {"type": "tool_use", "name": name, "input": step[1]},
        ]

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": USAGE,
        }

    def _start_sse(self, h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True

    def _sse(self, h: BaseHTTPRequestHandler, event: dict[str, Any]) -> None:
        h.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        h.wfile.flush()

    def _stream(self, h: BaseHTTPRequestHandler, body: dict[str, Any], blocks: list[dict[str, Any]]) -> None:
        self._start_sse(h)
        self._sse(h, {"type": "message_start", "message": self._message(body)})
        stop = "end_turn"
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                self._sse(
                    h,
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                for part in block.get("parts") or [block["text"]]:
                    delta = {"type": "text_delta", "text": part}
                    self._sse(h, {"type": "content_block_delta", "index": i, "delta": delta})
            else:
                stop = "tool_use"
                start = {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": block["name"],
                    "input": {},
                }
                self._sse(h, {"type": "content_block_start", "index": i, "content_block": start})
                raw = json.dumps(block["input"])
                for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                    delta = {"type": "input_json_delta", "partial_json": part}
                    self._sse(h, {"type": "content_block_delta", "index": i, "delta": delta})
            self._sse(h, {"type": "content_block_stop", "index": i})
        self._sse(
            h,
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": USAGE},
        )
        self._sse(h, {"type": "message_stop"})

    def _drip(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        self._start_sse(h)
        self._sse(h, {"type": "message_start", "message": self._message(body)})
        self._sse(
            h, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        )
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and not self._stop.wait(0.3):
                delta = {"type": "text_delta", "text": "."}
                self._sse(h, {"type": "content_block_delta", "index": 0, "delta": delta})
        except OSError:
            return
