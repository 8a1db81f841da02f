#!/usr/bin/env python3
"""A fake `ndjson` coding agent that changes the repository it is started in (its working folder).

The prompt decides: `EDIT` edits src/app.py, adds notes.md and a binary file, deletes old.txt, and commits
the edit itself (the rest is left for the server to commit); `SECOND` edits README.md only; `ASK` edits
CHANGES.md, asks for approval, then edits it again; `HANG` writes hang.txt and waits to be canceled; `GATE`
writes gated.md and waits until the file `gate-<contextId>` appears in its HOME (the test opens it); `BIG`
adds a long file; `FILES` reports the files its prompt line says were attached, with their text; `ENV <path>`
writes its environment to env.json and says it, and whether it can read <path>; `REDIRECT <url>` points
its checkout's config (remote, insteadOf, proxy, a2a.source, a2a.branch) at <url> and edits notes.md;
anything else changes nothing. It reports its working folder and ends with done.

For the console's tests: `SCRIPT` adds a file whose name, text and commit subject try to run script in a
page that would show them as HTML; `BREAK` deletes the checkout's .git, so its change cannot be measured.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def out(obj):
    print(json.dumps(obj), flush=True)


def git(*args):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.getcwd(),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Fake Agent",
        "GIT_AUTHOR_EMAIL": "agent@example.com",
        "GIT_COMMITTER_NAME": "Fake Agent",
        "GIT_COMMITTER_EMAIL": "agent@example.com",
    }
    return subprocess.run(["git", *args], check=True, env=env, capture_output=True).stdout.decode().strip()


prompt = json.loads(sys.stdin.readline())
text = prompt["text"]
here = Path.cwd()
out({"kind": "init", "model": "fake-repo", "session_id": "r-" + prompt["contextId"]})
if text == "EDIT":
    (here / "src" / "app.py").write_text("def main():\n    return 2\n")
    git("commit", "--quiet", "-am", "agent: main returns 2")
    (here / "notes.md").write_text("# Notes\n\nwritten by the agent\n")
    (here / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (here / "old.txt").unlink()
elif text == "SECOND":
    with (here / "README.md").open("a") as f:
        f.write("\nA second turn was here.\n")
elif text == "ASK":
    (here / "CHANGES.md").write_text("- before asking\n")
    out({"kind": "approval_required", "text": "Go on?"})
    answer = json.loads(sys.stdin.readline())
    (here / "CHANGES.md").write_text(f"- before asking\n- after {answer['text']}\n")
elif text == "HANG":
    (here / "hang.txt").write_text("written before the cancel\n")
    out({"kind": "thinking", "text": "hanging"})
    time.sleep(600)
elif text == "GATE":
    (here / "gated.md").write_text("written before the gate\n")
    gate = Path(os.environ["HOME"]) / f"gate-{prompt['contextId']}"
    while not gate.exists():
        time.sleep(0.05)
elif text == "BIG":
    (here / "big.txt").write_text("".join(f"line {i} of a long new file\n" for i in range(400)))
elif text == "SCRIPT":
    name = "<img src=x onerror=window.__pwned=1>.html"
    (here / name).write_text('<script>window.__pwned = 2</script>\n<img src=x onerror="alert(3)">\n')
    git("add", "--", name)
    git("commit", "--quiet", "-m", "<script>window.__pwned = 4</script>")
elif text == "BREAK":
    shutil.rmtree(here / ".git")
elif text.startswith("FILES"):
    seen = {name: (here / name).read_text() for name in prompt["attachments"]}
    out({"kind": "thinking", "text": json.dumps(seen, sort_keys=True)})
elif text.startswith("ENV "):
    try:
        seen = Path(text[4:]).read_text()
    except OSError as exc:
        seen = f"unreadable: {exc.strerror}"
    (here / "env.json").write_text(json.dumps(dict(os.environ), sort_keys=True))
    out({"kind": "thinking", "text": json.dumps({"environ": dict(os.environ), "file": seen})})
elif text.startswith("REDIRECT "):
    url = text[9:]
    git("config", "remote.origin.url", url)
    git("config", "remote.origin.pushurl", url)
    git("config", f"url.{url}.insteadOf", git("config", "a2a.source"))
    git("config", "http.proxy", "http://127.0.0.1:9")
    git("config", "a2a.source", url)
    git("config", "a2a.branch", "main")
    (here / "notes.md").write_text("redirected\n")
out({"kind": "thinking", "text": f"worked in {here}"})
out({"kind": "done", "summary": "fake repo agent finished"})
