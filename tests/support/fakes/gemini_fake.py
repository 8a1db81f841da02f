"""A fake of the Gemini API (`streamGenerateContent?alt=sse`, `generateContent`) for the real Gemini CLI.

The CLI needs three settings to use it (see `gemini_env` and `write_gemini_home`): the base URL and key,
`security.auth.selectedType = gemini-api-key` in `$HOME/.gemini/settings.json` (else it picks the
"gateway" auth and exits 41), and a trusted workspace (the adapter passes `--skip-trust`; by hand, set
GEMINI_CLI_TRUST_WORKSPACE=true). Run alone: `python -m tests.support.fakes.gemini_fake`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import (
    ERROR_MESSAGE,
    TEXT_CHUNKS,
    FakeServer,
    Reply,
    Scenario,
    call_final_text,
    call_script,
    final_text,
    next_call,
    offered_tool,
    scenario_of,
)

USAGE = {
    "promptTokenCount": 20,
    "candidatesTokenCount": 10,
    "totalTokenCount": 30,
    "cachedContentTokenCount": 6,
}
"""What every answer says it used (some of the prompt cached, so a test sees the cached count carried)."""
HELPER_JSON = {
    "complexity_reasoning": "a simple request",
    "complexity_score": 1,
    "reasoning": "the model has answered",
    "next_speaker": "user",
}
"""One answer for every non-streamed helper call (the "auto" model router, next-speaker checks)."""


def write_gemini_home(home: Path) -> Path:
    """A fresh HOME whose Gemini settings select API-key auth."""
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return home


def gemini_env(base_url: str, home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": "sk-test",
    }


def plan(body: dict[str, Any]) -> tuple[str, Any]:
    """("final", tool output) | ("tool", Scenario) | ("mcp", (name, args)) | ("said", text) |
    ("error" | "hang" | "text", None) for one request."""
    contents = [c for c in body.get("contents") or () if isinstance(c, dict)]

    def texts(c: dict[str, Any]) -> list[str]:
        return [p["text"] for p in c.get("parts") or () if isinstance(p, dict) and "text" in p]

    users = [n for n, c in enumerate(contents) if c.get("role") == "user" and texts(c)]
    last_user = users[-1] if users else -1
    responses = [
        part["functionResponse"]
        for c in contents[last_user + 1 :]
        for part in c.get("parts") or ()
        if isinstance(part, dict) and "functionResponse" in part
    ]
    if calls := call_script(texts(contents[last_user]) if users else []):
        said = [json.dumps(r.get("response")) for r in responses]
        step = next_call(calls, said)
        if step is None:
            return "said", call_final_text(said[-1] if said else "")
        offered = [
            str(d.get("name"))
            for t in body.get("tools") or ()
            if isinstance(t, dict)
            for d in t.get("functionDeclarations") or ()
            if isinstance(d, dict)
        ]
        name = offered_tool(offered, step[0])
        if name is None:
            return "said", f"No tool a2a {step[0]} is offered"
        return "mcp", (name, step[1])
    scenario = scenario_of(texts(contents[last_user]) if users else [])
    if scenario.kind == "loop" and body.get("tools"):
        return "tool", replace(scenario, step=len(responses) + 1)
    if scenario.kind == "twice" and body.get("tools") and len(responses) < 2:
        return "tool", scenario
    if responses:
        return "final", json.dumps(responses[-1].get("response"))
    if scenario.kind in ("error", "hang"):
        return scenario.kind, None
    if scenario.kind != "text" and body.get("tools"):
        return "tool", scenario
    return "text", None


def _chunk(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": "fake-gemini"}
    if last:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = USAGE
    return chunk


class GeminiFake(FakeServer):
    def reply(self, method: str, path: str, body: Any) -> Reply:
        route = path.split("?")[0]
        if method != "POST" or not isinstance(body, dict):
            return Reply(404, {"error": {"code": 404, "message": f"fake: no {method} {path}"}})
        if route.endswith(":generateContent"):
            text = json.dumps(HELPER_JSON)
            return Reply(body={**_chunk([{"text": text}], last=True)})
        if route.endswith(":countTokens"):
            return Reply(body={"totalTokens": 10})
        if not route.endswith(":streamGenerateContent"):
            return Reply(404, {"error": {"code": 404, "message": f"fake: no {method} {path}"}})
        kind, arg = plan(body)
        if kind == "error":
            error = {"code": 400, "message": ERROR_MESSAGE, "status": "INVALID_ARGUMENT"}
            return Reply(400, {"error": error})
        if kind == "hang":
            return Reply(hang=True)
        if kind == "tool":
            return Reply(events=[_chunk([self._function_call(arg)], last=True)])
        if kind == "mcp":
            name, args = arg
            return Reply(events=[_chunk([{"functionCall": {"name": name, "args": args}}], last=True)])
        chunks = [final_text(arg)] if kind == "final" else [arg] if kind == "said" else list(TEXT_CHUNKS)
        return Reply(events=[_chunk([{"text": c}], last=i == len(chunks) - 1) for i, c in enumerate(chunks)])

    @staticmethod
    def _function_call(scenario: Scenario) -> dict[str, Any]:
        if scenario.kind == "patch":  # Gemini's file edit is its write_file tool, not a shell command
            args = {"file_path": scenario.file, "content": "patched\n"}
            return {"functionCall": {"name": "write_file", "args": args}}
        args = {"command": scenario.command(), "description": f"fake {scenario.kind} step"}
        return {"functionCall": {"name": "run_shell_command", "args": args}}


if __name__ == "__main__":
    fake = GeminiFake()
    print(fake.url, flush=True)
    fake.join()
