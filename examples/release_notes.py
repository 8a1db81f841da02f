"""A complete agent on the public agent API: it streams, asks a question, and emits a file and data.

Run it with one command from the repository root:

    make run-example        # = AGENT_ADAPTER=examples.release_notes:ReleaseNotesAgent make run

then send it a list of changes, one per line (see "Write your own agent" in the README for the curl
session). It drafts release notes while you watch, asks which version they are for, and answers with a
`CHANGELOG.md` file artifact and a data artifact counting the changes by kind.
"""

from __future__ import annotations

import asyncio
import re

from app.agents.sdk import Agent, Message, Request, Skill, TaskContext, data_part, file_part

KINDS = {"feat": "Features", "fix": "Fixes", "docs": "Documentation"}
VERSION = re.compile(r"^v?\d+\.\d+(\.\d+)?$")


class ReleaseNotesAgent(Agent):
    name = "Release Notes Writer"
    description = "Turns a list of conventional-commit subjects into release notes."
    skills = (
        Skill(
            id="release-notes",
            name="Write release notes",
            description="Groups `feat:`/`fix:`/`docs:` lines by kind and writes a CHANGELOG section.",
            tags=("changelog", "release"),
            examples=("feat: dark mode\nfix: crash on empty input",),
            output_modes=("text/plain", "text/markdown", "application/json"),
        ),
    )
    input_modes = ("text/plain",)
    output_modes = ("text/plain", "text/markdown", "application/json")

    def __init__(self, delay_s: float = 0.2) -> None:
        """`delay_s` (from AGENT_OPTIONS) paces the streamed sections so a person sees them arrive."""
        self.delay_s = delay_s

    async def reply(self, request: Request) -> Message | None:
        """A quick answer without a task for a greeting."""
        if request.text.strip().lower() in ("hi", "hello", "help"):
            return request.agent_message("Send me commit subjects, one per line (feat:, fix:, docs:).")
        return None

    async def run(self, task: TaskContext) -> None:
        groups: dict[str, list[str]] = {}
        for line in filter(None, (raw.strip() for raw in task.text.splitlines())):
            kind, _, subject = line.partition(":")
            groups.setdefault(KINDS.get(kind.strip(), "Other"), []).append(subject.strip() or line)
        if not groups:
            await task.reject("There is nothing to write notes about.")
            return
        await task.working(f"Grouping {sum(map(len, groups.values()))} changes")
        body = []
        for title, items in groups.items():
            section = f"### {title}\n" + "".join(f"- {item}\n" for item in items)
            body.append(section)
            await task.say(section)
            await asyncio.sleep(self.delay_s)
        answer = await task.ask("Which version are these notes for (e.g. 1.4.0)?")
        while not VERSION.match(version := answer.text().strip()):
            answer = await task.ask(f"{version!r} is not a version number; try again (e.g. 1.4.0).")
        notes = f"## {version}\n\n" + "\n".join(body)
        await task.artifact(
            [file_part(notes.encode(), "text/markdown", "CHANGELOG.md")],
            name="changelog",
            description=f"Release notes for {version}",
        )
        counts = {title: len(items) for title, items in groups.items()}
        await task.artifact([data_part({"version": version, "counts": counts})], name="summary")
        await task.complete(f"Release notes for {version} are ready.")
