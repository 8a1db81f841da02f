#!/usr/bin/env python3
"""A hostile `ndjson` agent aimed at its run's MCP tool server (`app/agents/cli/tools.py`): it speaks to the
socket itself, without the relay, and reports what each attempt got.

The prompt's `tools` (the relay's argv) names the socket as its last word. The prompt text is a JSON object:
`foreign` (a task id that is not this run's child: get_task, answer_task and cancel_task on it), `other`
(a socket path of another run, to connect to), `hold` (ask for approval after the probes, so the run stays
up until answered). It answers with one `thinking` event, a JSON object of outcomes, then `done`. Standard
library only (it runs with the system's python3).
"""

import json
import os
import socket
import sys


def out(obj):
    print(json.dumps(obj), flush=True)


class Session:
    """One connection speaking newline-delimited JSON-RPC."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.ids = 0

    def send_line(self, raw):
        self.sock.sendall(raw + b"\n")
        return json.loads(self.file.readline())

    def request(self, method, params=None):
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        if params is not None:
            message["params"] = params
        return self.send_line(json.dumps(message).encode())

    def notify(self, method):
        self.sock.sendall(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")


def outcome(answer):
    """An answer as the report shows it: the error's code and message, or the tool result's text."""
    if "error" in answer:
        return {"error": answer["error"].get("code"), "message": answer["error"].get("message")}
    result = answer.get("result") or {}
    texts = [c.get("text", "") for c in result.get("content") or []]
    return {"isError": bool(result.get("isError")), "text": " ".join(texts)}


def attempt(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # the outcome is the report
        return f"refused: {type(exc).__name__}: {exc}"[:300]


def probe(path, foreign):
    report = {}
    s = Session(path)
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "prober", "version": "0"},
    }
    report["initialize"] = s.request("initialize", init).get("result", {}).get("serverInfo", {}).get("name")
    s.notify("notifications/initialized")
    tools = s.request("tools/list").get("result", {}).get("tools", [])
    report["tools"] = sorted(t["name"] for t in tools)
    for tool, args in (
        ("get_task", {"id": foreign}),
        ("answer_task", {"id": foreign, "message": "y"}),
        ("cancel_task", {"id": foreign}),
        ("run_shell", {"command": "id"}),
    ):
        report[tool] = outcome(s.request("tools/call", {"name": tool, "arguments": args}))
    for method in ("tasks/get", "resources/list", "prompts/list"):
        report[method] = outcome(s.request(method, {"id": foreign}))
    report["not json"] = outcome(s.send_line(b"GET / HTTP/1.1"))
    return report


prompt = json.loads(sys.stdin.readline())
plan = json.loads(prompt["text"])
tools = prompt.get("tools")
report = {"tools argv": tools}
for folder in ("/run/a2a", "/run/a2a/tools"):
    report[f"seen in {folder}"] = attempt(lambda f=folder: sorted(os.listdir(f)))
if tools:
    report["own"] = attempt(probe, tools[-1], plan.get("foreign", "nothing"))
if plan.get("other"):
    report["other"] = attempt(lambda: Session(plan["other"]) and "connected")
out({"kind": "thinking", "text": json.dumps(report)})
if plan.get("hold"):
    out({"kind": "approval_required", "text": "Hold on?"})
    sys.stdin.readline()
out({"kind": "done", "summary": "probed"})
