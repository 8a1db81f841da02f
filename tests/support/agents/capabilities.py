"""A test agent written on the public agent API, one command per capability (the message text picks it).

- `reply:<text>`      a direct Message, no task
- `say:<text>`        text streamed into the response artifact, then completed by returning
- `chunks:<n>`        one artifact `numbers` in n chunks (`append`, `lastChunk` on the last)
- `file-bytes`        a file artifact sent inline; `file-url` one sent by URL; `data` a data artifact
- `working:<text>`    a working status with a message, then completed
- `ask:<question>`    input-required; says `answer:<text>` and `data:<json>` of the reply
- `auth`              auth-required; says `token:<text>` of the reply
- `done:<text>`       completes with a final message; `fail:<text>` fails; `reject:<text>` rejects
- `raise`             raises inside `run` (the task fails with the exception's text)
- `spin`              emits chunks without pause until cancelled
- `whoami`            a data artifact with what the agent was told: principal, ids, extensions (requested
                      and active), ...
- `files`             a data artifact describing each incoming part (kind, media type, name, size)
"""

from __future__ import annotations

import json

from app.agents.sdk import (
    Agent,
    Extension,
    Message,
    Request,
    Skill,
    TaskContext,
    data_part,
    file_part,
    text_part,
    url_part,
)


class CapabilitiesAgent(Agent):
    name = "Capabilities Test Agent"
    description = "Exercises every emission of the agent API; used by the test suite."
    skills = (
        Skill(
            id="capabilities",
            name="Capabilities",
            description="One command per agent-API capability.",
            tags=("test",),
            examples=("chunks:3",),
            input_modes=("text/plain", "image/png"),
            output_modes=("text/plain", "application/json", "text/csv"),
        ),
    )
    input_modes = ("text/plain", "application/json", "image/*")
    output_modes = ("text/plain", "application/json", "text/csv")

    def __init__(self, greeting: str = "hello") -> None:
        self.greeting = greeting

    async def reply(self, request: Request) -> Message | None:
        verb, _, arg = request.text.partition(":")
        if verb == "reply":
            return request.agent_message(f"{self.greeting}, {arg}", parts=[data_part({"direct": True})])
        return None

    async def run(self, task: TaskContext) -> None:
        verb, _, arg = task.text.partition(":")
        if verb == "say":
            await task.say(arg)
        elif verb == "chunks":
            n = int(arg)
            aid = None
            for i in range(n):
                aid = await task.artifact(
                    [text_part(f"{i};")],
                    artifact_id=aid,
                    name="numbers",
                    description="counted in chunks",
                    metadata={"total": n},
                    append=i > 0,
                    last_chunk=i == n - 1,
                )
        elif verb == "file-bytes":
            await task.artifact([file_part(b"a,b\n1,2\n", "text/csv", "table.csv")], name="table")
        elif verb == "file-url":
            await task.artifact([url_part("https://example.com/r.png", "image/png", "r.png")], name="image")
        elif verb == "data":
            await task.artifact([data_part({"answer": 42})], name="json")
        elif verb == "working":
            await task.working(arg)
        elif verb == "ask":
            answer = await task.ask(arg)
            await task.say(f"answer:{answer.text()}")
            for part in answer.parts:
                if part.kind == "data":
                    await task.say(f" data:{json.dumps(part.data, sort_keys=True)}")
        elif verb == "auth":
            answer = await task.ask_auth("Sign in first", parts=[data_part({"scheme": "bearer"})])
            await task.say(f"token:{answer.text()}")
        elif verb == "done":
            await task.complete(arg)
        elif verb == "fail":
            await task.fail(arg)
        elif verb == "reject":
            await task.reject(arg)
        elif verb == "raise":
            raise ValueError("the agent raised")
        elif verb == "spin":
            i = 0
            while True:
                await task.say(f"{i} ")
                i += 1
        elif verb == "whoami":
            info = {
                "principal": task.principal,
                "taskId": task.id,
                "contextId": task.context_id,
                "extensions": list(task.extensions),
                "activeExtensions": list(task.active_extensions),
                "metadata": task.metadata,
                "history": len(task.history),
                "greeting": self.greeting,
            }
            await task.artifact([data_part(info)], name="whoami")
        elif verb == "files":
            parts = [
                {
                    "kind": p.kind,
                    "mediaType": p.media_type,
                    "name": p.filename,
                    "size": len(p.raw) if p.raw is not None else None,
                    "url": p.url,
                    "data": p.data,
                }
                for p in task.parts
            ]
            await task.artifact([data_part({"parts": parts})], name="parts")
        else:
            await task.say(task.text)


AGENT_REQUIRED = "https://example.com/ext/agent-required/v1"
AGENT_OPTIONAL = "https://example.com/ext/agent-optional/v1"


class ExtensionsAgent(CapabilitiesAgent):
    """The same agent declaring two extensions through the agent API, one of them required."""

    name = "Extensions Test Agent"
    extensions = (
        Extension(AGENT_REQUIRED, "A request must name it", required=True),
        Extension(AGENT_OPTIONAL, "Activated when asked", params={"depth": 2, "modes": ["a", "b"]}),
    )
