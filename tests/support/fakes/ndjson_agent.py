#!/usr/bin/env python3
"""A fake `ndjson` agent: reads the prompt line from stdin and prints AgentEvents, one JSON per line.

The prompt decides: `ASK` asks for approval and reports the answer; `SLEEP <marker>` starts `sleep <marker>`
and waits (for cancel); `CRASH` writes to stderr and exits 3; `SILENT` exits 0 without done; `BIG` sends a
2 MB chunk; anything else says hello in two chunks. It ends with done (summary, stats and usage; `ASK` also
reports usage before it asks, without a cost). Its session names the prompt's `model` (the task's), else
`fake-ndjson`.
"""

import json
import subprocess
import sys
import time


def out(obj):
    print(json.dumps(obj), flush=True)


prompt = json.loads(sys.stdin.readline())
text = prompt["text"]
print("warming up (not JSON)", flush=True)
out({"kind": "init", "model": prompt.get("model") or "fake-ndjson", "session_id": "s-" + prompt["contextId"]})
if text == "CRASH":
    print("Traceback: something broke in the fake agent", file=sys.stderr, flush=True)
    sys.exit(3)
if text == "SILENT":
    sys.exit(0)
if text == "ASK":
    out({"kind": "usage", "usage": {"model": "fake-ndjson", "input_tokens": 50, "output_tokens": 5}})
    out({"kind": "approval_required", "text": "Run make clean?"})
    answer = json.loads(sys.stdin.readline())
    out({"kind": "thinking", "text": f"approved={answer['approved']} text={answer['text']}"})
elif text.startswith("SLEEP "):
    subprocess.Popen(["sleep", text.split()[1]])
    out({"kind": "tool_use", "tool_name": "shell", "tool_input": {"command": "sleep"}})
    time.sleep(600)
elif text == "BIG":
    out({"kind": "thinking", "text": "x" * 2_000_000})
else:
    out({"kind": "thinking", "text": "hello "})
    out({"type": "tool_use", "tool_name": "shell", "tool_input": {"command": "ls"}})
    out({"kind": "tool_result", "tool_name": "shell", "text": "README.md"})
    out({"kind": "nonsense", "text": "ignored"})
    out({"kind": "thinking", "text": f"from {prompt['workspace']}"})
usage = {
    "model": "fake-ndjson",
    "input_tokens": 120,
    "output_tokens": 30,
    "cache_read_tokens": 10,
    "cost_usd": 0.003,
}
out({"kind": "done", "summary": "fake finished", "stats": {"files": 0}, "usage": {**usage, "turns": 2}})
