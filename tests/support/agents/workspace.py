"""A Python agent that works on its task's workspace (`workspace = True`), by the message text:

- `EDIT`   edits `src/app.py`, adds `notes.md`, deletes `old.txt`, then completes
- `FILES`  says a JSON object of its attachments (path under the workspace → text) and completes
- `ASK`    appends a line to `CHANGES.md`, asks; appends `after <answer>` and completes
- `RAISE`  adds `half.txt`, then raises (the task fails)
- `WHERE`  says a JSON object: the workspace (or null), whether it is a checkout, its attachments

`PlainAgent` is the same agent without `workspace`: it is given no folder. `PureAgent` says `pure` too.
"""

from __future__ import annotations

import json

from app.agents.sdk import Agent, Skill, TaskContext


class WorkspaceAgent(Agent):
    name = "Workspace Test Agent"
    description = "Edits files in its task's workspace; used by the test suite."
    skills = (Skill("edit", "Edit", "Edits the task's files"),)
    input_modes = ("text/plain", "*/*")
    workspace = True

    async def run(self, task: TaskContext) -> None:
        ws = task.workspace
        command = task.text.strip()
        if command == "WHERE":
            where = {
                "workspace": str(ws) if ws is not None else None,
                "checkout": ws is not None and (ws / ".git").is_dir(),
                "attachments": [str(p) for p in task.attachments],
            }
            await task.say(json.dumps(where))
            return
        assert ws is not None, "a workspace agent is given its folder"
        if command == "EDIT":
            (ws / "src" / "app.py").write_text("def main():\n    return 2\n")
            (ws / "notes.md").write_text("# Notes\n\n- written by the agent\n")
            (ws / "old.txt").unlink()
            await task.complete("edited")
        elif command == "FILES":
            seen = {str(p.relative_to(ws)): p.read_text() for p in task.attachments}
            await task.say(json.dumps(seen))
        elif command == "ASK":
            with (ws / "CHANGES.md").open("a") as out:
                out.write("- before asking\n")
            answer = await task.ask("Go on?")
            with (ws / "CHANGES.md").open("a") as out:
                out.write(f"- after {answer.text()}\n")
        elif command == "RAISE":
            (ws / "half.txt").write_text("half done\n")
            raise RuntimeError("the agent broke halfway")
        else:
            await task.say("nothing to do")


class PlainAgent(WorkspaceAgent):
    name = "Plain Test Agent"
    workspace = False


class PureAgent(WorkspaceAgent):
    """Declares what cannot be: files and no effects (refused when loaded)."""

    pure = True
