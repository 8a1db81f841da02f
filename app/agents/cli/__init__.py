"""The coding-agent CLI adapters: Claude Code, Codex, Gemini CLI, Cursor and `ndjson` (a command of yours),
on what they share (`run.py`: workspace, session memory, approvals, the run loop; `modes.py`: headless or
JSON-RPC; `process.py`: the CLI's process group), each CLI's output parsed into AgentEvents."""
