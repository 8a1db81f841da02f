#!/usr/bin/env python3
"""A fake `ndjson` agent: reads the prompt line from stdin and prints AgentEvents, one JSON per line.

The prompt decides: `ASK` asks for approval and reports the answer; `SLEEP <marker>` starts `sleep <marker>`
and waits (for cancel); `SPEND <usd> <marker>` starts `sleep <marker>`, reports ten turns of `<usd>` each
(a `usage` line per turn) and waits (for its budget to stop it); `CRASH` writes to stderr and exits 3;
`SILENT` exits 0 without done; `BIG` sends a 2 MB chunk; `WORK <lines> <interval_s>` writes `progress.txt`
(the task's id) in its workspace, then streams `<lines>` chunks `<interval_s>` apart; a resumed run (its
prompt the resume note, "Your previous run of this task was interrupted ...") reports the `progress.txt` it
found (restored from the checkpoint) and finishes, or fails without one; anything else says hello in two
chunks. It ends with done (summary, stats and usage; `ASK` also reports usage before it asks, without a
cost). Its session names the prompt's `model` (the task's), else `fake-ndjson`.
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
elif text.startswith("SPEND "):
    _, usd, marker = text.split()
    subprocess.Popen(["sleep", marker])
    out({"kind": "thinking", "text": "started sleep "})
    for turn in range(10):
        out({"kind": "thinking", "text": f"turn {turn} "})
        out({"kind": "usage", "usage": {"model": "fake-ndjson", "output_tokens": 10, "cost_usd": float(usd)}})
    time.sleep(600)
elif text.startswith("WORK "):
    _, lines, interval = text.split()
    with open("progress.txt", "w") as f:
        f.write(prompt["taskId"])
    for n in range(int(lines)):
        out({"kind": "thinking", "text": f"line {n} "})
        time.sleep(float(interval))
elif text.startswith("Your previous run of this task was interrupted"):
    try:
        with open("progress.txt") as f:
            found = f.read()
    except FileNotFoundError:
        out({"kind": "error", "text": "resumed without progress.txt: the workspace was not restored"})
        sys.exit(0)
    out({"kind": "thinking", "text": f"resumed with progress.txt of {found}"})
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
