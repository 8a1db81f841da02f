#!/usr/bin/env python3
"""A fake `cursor-agent -p --output-format stream-json [--force] <prompt>` printing the documented lines.

It writes its argv to `argv.json` in its working directory. The prompt decides: `SHELL: <cmd>` runs the
command with a shellToolCall pair around it; `FAIL` writes to stderr and exits 2 without a result line;
anything else is a plain answer.
"""

import json
import subprocess
import sys

SID = "0b6c1d9e-1111-4222-8333-444455556666"


def out(obj):
    print(json.dumps(obj), flush=True)


prompt = sys.argv[-1]
with open("argv.json", "w") as f:
    json.dump(sys.argv[1:], f)
print("cursor-agent fake starting (not JSON)", flush=True)
out(
    {
        "type": "system",
        "subtype": "init",
        "apiKeySource": "login",
        "cwd": ".",
        "session_id": SID,
        "model": "Auto",
        "permissionMode": "default",
    }
)
out(
    {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        "session_id": SID,
    }
)
out({"type": "thinking", "subtype": "delta", "text": "Need to", "session_id": SID})
out({"type": "thinking", "subtype": "completed", "session_id": SID})
if "FAIL" in prompt:
    print("Error: fake cursor could not reach the model", file=sys.stderr, flush=True)
    sys.exit(2)
text = "Listing the directory."
out(
    {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "session_id": SID,
    }
)
if prompt.startswith("SHELL: "):
    cmd = prompt[len("SHELL: ") :]
    args = {"command": cmd, "toolCallId": "call_abc"}
    out(
        {
            "type": "tool_call",
            "subtype": "started",
            "call_id": "call_abc",
            "tool_call": {"shellToolCall": {"args": args}},
            "session_id": SID,
        }
    )
    done = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    res = {"success": {"exitCode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}}
    out(
        {
            "type": "tool_call",
            "subtype": "completed",
            "call_id": "call_abc",
            "tool_call": {"shellToolCall": {"args": args, "result": res}},
            "session_id": SID,
        }
    )
out(
    {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": " All done."}]},
        "session_id": SID,
    }
)
out(
    {
        "type": "result",
        "subtype": "success",
        "duration_ms": 4986,
        "duration_api_ms": 4986,
        "is_error": False,
        "result": text + " All done.",
        "session_id": SID,
        "request_id": "9c1e-77",
    }
)
