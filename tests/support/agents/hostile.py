"""A test agent whose every output tries to run script in a browser that renders it as HTML.

Each run emits: an artifact of text with `<script>`, `<img onerror>` and a `javascript:` link; a data
artifact holding the same strings; an HTML file whose bytes hold a script; a file by URL with a
`javascript:` URL and one with an `http` URL to another origin; a working status whose message is HTML; then
an HTML question (input-required), and completes with an HTML message once answered.
"""

from __future__ import annotations

from app.agents.sdk import Agent, Skill, TaskContext, data_part, file_part, text_part, url_part

SCRIPT = "<script>window.__pwned = 1; alert('script')</script>"
IMG = "<img src=x onerror=\"window.__pwned = 2; alert('img')\">"
LINK = "<a href=\"javascript:alert('link')\">click me</a>"
HOSTILE = f"{SCRIPT}{IMG}{LINK}"
ELSEWHERE = "http://elsewhere.invalid/track.png"


class HostileAgent(Agent):
    name = "Hostile"
    description = "Answers with output that tries to run script in a browser"
    skills = (Skill("hostile", "Hostile output", "Emits HTML and script as output"),)

    async def run(self, task: TaskContext) -> None:
        await task.artifact([text_part(HOSTILE)], name="hostile-text", last_chunk=True)
        await task.artifact(
            [data_part({"html": HOSTILE, "nested": [IMG]})], name="hostile-data", last_chunk=True
        )
        await task.artifact(
            [file_part(f"<html><body>{SCRIPT}</body></html>".encode(), "text/html", name="page.html")],
            name="hostile-file",
            last_chunk=True,
        )
        await task.artifact(
            [
                url_part("javascript:alert('url')", name="evil.txt"),
                url_part(ELSEWHERE, "image/png", name="track.png"),
            ],
            name="hostile-links",
            last_chunk=True,
        )
        await task.working(IMG)
        answer = await task.ask(f"Allow {SCRIPT}?")
        await task.complete(f"{LINK} answered {answer.text()}")
