"""What the `/mcp` tools do (`mcp.py` is their wire): one principal's view of every role's tasks, through the
roles' task services and the same checks as an A2A send.

A task started here is an ordinary task of its role, owned by the caller: `tasks/get`, the console and an
A2A stream see it. A send is admitted like a `SendMessage` (`ops/admission.py` `admit`: media types, sizes,
the task rate, `metadata.repository` against REPO_ALLOW, the files) and, when it waits, holds a stream slot
like a `SendStreamingMessage`. A task id names no role, so a read tries each role's service: the store
scopes reads by owner and role, so another principal's task is "not found" exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.requests import Request

from app.agents.calls import AgentInfo, ChildTask, child_task
from app.agents.calls_wire import agents_to_wire, child_to_wire
from app.agents.repos.policy import METADATA_KEY
from app.protocol.errors import InvalidParamsError, TaskNotFoundError
from app.protocol.events import EventRecord, StatusUpdate
from app.protocol.model import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Message,
    Part,
    Role,
    SendConfig,
    Task,
    TaskState,
    new_id,
)
from app.tasks.service import Snapshot

from ..deps import Components, components, owner_of
from ..ops.admission import admit, open_stream
from ..ops.calls import Call, Item, requested_extensions

STOP_STATES = TERMINAL_STATES | INTERRUPTED_STATES
"""Where a tool that waits returns: the task ended, or it asks (input-required, auth-required)."""
MAX_LIST = 100

Progress = Callable[[float, str], Awaitable[None]]
"""Tells the host how a waited-on task moves: its last event number, and a line about that event."""


class FileIn(BaseModel):
    """A file for the agent: its bytes in base64, or a URL the server fetches (the role's rules apply)."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=255, description="The file's name, e.g. diff.patch")
    media_type: str | None = Field(default=None, max_length=255, description="e.g. text/plain")
    content_base64: str | None = Field(default=None, description="The file's bytes, base64-encoded")
    url: str | None = Field(default=None, max_length=4096, description="Where the server may fetch it")

    @model_validator(mode="after")
    def _one_source(self) -> FileIn:
        if (self.content_base64 is None) == (self.url is None):
            raise ValueError("a file needs exactly one of content_base64 or url")
        return self

    @field_validator("content_base64")
    @classmethod
    def _base64(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("must be base64-encoded") from None
        return v

    def part(self) -> Part:
        raw = base64.b64decode(self.content_base64) if self.content_base64 is not None else None
        return Part(raw=raw, url=self.url, media_type=self.media_type, filename=self.name)


class Host:
    """One MCP request's caller (the principal the guard put in the request) and the roles it may use."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.owner = owner_of(request)
        self.c = components(request)
        self.roles: Mapping[str, Components] = self.c.roles or {self.c.role: self.c}

    def role(self, name: str) -> Components:
        found = self.roles.get(name)
        if found is None:
            raise InvalidParamsError(
                f"No role named {name!r}; the roles are: {', '.join(self.roles)}", {"role": name}
            )
        return found

    def call(self, c: Components) -> Call:
        """The A2A call a send on role `c` makes: the same owner, extensions and version as any send."""
        requested = requested_extensions(self.request)
        return Call(
            headers=self.request.headers,
            c=c,
            owner=self.owner,
            version="1.0",
            extensions=requested,
            active=c.card.extensions.activate(requested, False),
        )

    # ---- reads ----------------------------------------------------------------------------------

    async def list_agents(self) -> list[AgentInfo]:
        """Every role with its card's name, description and skills, available when an agent of it runs
        somewhere now (`GET /agents` knows the same)."""
        instances = await self.c.discovery.live() if self.c.discovery is not None else []
        live = {i.role for i in instances}
        out = []
        for name, c in self.roles.items():
            card = orjson.loads(c.card.v10.body)
            out.append(
                AgentInfo(
                    role=name,
                    name=str(card.get("name", name)),
                    description=str(card.get("description", "")),
                    skills=tuple(card.get("skills", ())),
                    available=name in live,
                )
            )
        return out

    async def find(self, task_id: str, history: int | None = 0) -> tuple[Components, Task]:
        """The caller's task (with its last `history` messages; None: all) and its role; TaskNotFoundError
        when no role has it for this caller."""
        for c in self.roles.values():
            try:
                return c, await c.service.get(self.owner, task_id, history)
            except TaskNotFoundError:
                continue
        raise TaskNotFoundError(f"Task {task_id} not found", {"taskId": task_id})

    async def get(self, task_id: str) -> ChildTask:
        c, task = await self.find(task_id)
        return child_task(task, c.role)

    async def list(self, role: str | None, state: TaskState | None, limit: int) -> list[ChildTask]:
        """The caller's newest tasks (of one role, or of all), newest status first."""
        roles = [self.role(role)] if role is not None else list(self.roles.values())
        found: list[tuple[Task, str]] = []
        for c in roles:
            page = await c.service.list(
                self.owner, state=state, page_size=limit, include_artifacts=True, history_length=0
            )
            found.extend((t, c.role) for t in page.tasks)
        found.sort(key=lambda tr: tr[0].status.timestamp, reverse=True)
        return [child_task(t, r) for t, r in found[:limit]]

    # ---- writes ---------------------------------------------------------------------------------

    async def run(
        self,
        role: str,
        text: str,
        files: Sequence[FileIn],
        context_id: str | None,
        repository: Any,
        wait: bool,
        progress: Progress,
    ) -> ChildTask:
        """A new task on `role`; with `wait`, followed until it ends or asks."""
        c = self.role(role)
        metadata = {METADATA_KEY: repository} if repository is not None else None
        message = Message(
            message_id=new_id(),
            role=Role.USER,
            parts=[Part(text=text), *(f.part() for f in files)],
            context_id=context_id or None,
            metadata=metadata,
        )
        return await self._send(c, message, wait, progress)

    async def answer(self, task_id: str, text: str, wait: bool, progress: Progress) -> ChildTask:
        """The answer to a task that asks (input-required; `y`/`n` for an approval), as a follow-up send."""
        c, task = await self.find(task_id)
        message = Message(
            message_id=new_id(),
            role=Role.USER,
            parts=[Part(text=text)],
            context_id=task.context_id,
            task_id=task.id,
        )
        return await self._send(c, message, wait, progress)

    async def cancel(self, task_id: str) -> ChildTask:
        c, _ = await self.find(task_id)
        return child_task(await c.service.cancel(self.owner, task_id), c.role)

    async def _send(self, c: Components, message: Message, wait: bool, progress: Progress) -> ChildTask:
        call = self.call(c)
        if not wait:
            config = SendConfig(blocking=False, history_length=0)
            made = await c.service.send(self.owner, await admit(message, call), config)
            return direct(made, c.role) if isinstance(made, Message) else child_task(made, c.role)

        async def start() -> tuple[AsyncIterator[Item], Callable[[Item], Any]]:
            admitted = await admit(message, call)
            return await c.service.stream(self.owner, admitted, None, SendConfig(history_length=0)), _same

        items, _ = await open_stream(call, start)
        try:
            first = await anext(items)
            if isinstance(first, Message):
                return direct(first, c.role)
            assert isinstance(first, Snapshot)
            task_id = first.task.id
            if first.task.status.state not in STOP_STATES:
                await _follow(items, progress, c.service.blocking_timeout_s)
        finally:
            await items.aclose()  # type: ignore[attr-defined]
        return child_task(await c.service.get(self.owner, task_id, 0), c.role)


def _same(item: Item) -> Item:
    return item


async def _follow(items: AsyncIterator[Item], progress: Progress, timeout_s: float) -> None:
    """Tell the host of each event until the task ends or asks (or `timeout_s`, the blocking timeout of a
    send, passes: the host then reads it with `get_task`)."""
    names: dict[str, str] = {}  # an artifact's name, which only its first chunk carries
    try:
        async with asyncio.timeout(timeout_s):
            async for item in items:
                if not isinstance(item, EventRecord):
                    continue
                event = item.event
                if isinstance(event, StatusUpdate):
                    note = event.status.message.text() if event.status.message else ""
                    await progress(item.seq, f"{event.status.state.value}{': ' if note else ''}{note}"[:500])
                    if event.status.state in STOP_STATES:
                        return
                else:
                    art = event.artifact
                    name = names.setdefault(art.artifact_id, art.name or art.artifact_id)
                    await progress(item.seq, f"artifact {name}")
    except TimeoutError:
        return


def direct(message: Message, role: str) -> ChildTask:
    """An agent's direct reply (a message, no task): no task id, completed with the reply's text."""
    return ChildTask(
        task_id="", context_id=message.context_id or "", role=role, state="completed", text=message.text()
    )


def as_json(found: ChildTask | AgentInfo | Sequence[ChildTask] | Sequence[AgentInfo]) -> Any:
    """The tools' answers as plain JSON values: the forms a run's own calls travel in (`calls_wire.py`), so
    an MCP host and an agent in its jail read the same keys (`taskId`, `contextId`, ...)."""
    if isinstance(found, ChildTask):
        return child_to_wire(found)
    if isinstance(found, AgentInfo):
        return agents_to_wire([found])[0]
    return [child_to_wire(f) if isinstance(f, ChildTask) else agents_to_wire([f])[0] for f in found]
