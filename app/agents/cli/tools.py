"""The MCP tool server of one CLI run: the run's `AgentCalls` as the tools its CLI calls.

When the server gives a run calls (`TaskContext.calls`), the run starts a `ToolServer` before its CLI: a unix
socket in a folder of its own (mode 0700, under the server's temporary folder, out of every workspace and
HOME), each connection served as one MCP session by the official SDK's low-level `Server` (newline-delimited
JSON-RPC, as over stdio). The CLI is configured to start `jail/tools_relay.py` as its stdio MCP server; the
relay copies its stdin and stdout to the socket, whose folder `Jail.wrap` shows in the jail read-only at a
fixed path (without the jail, the host's paths are used); a CLI that reads its MCP servers from a settings
file only (headless Gemini) gets one there (`write`).

The socket is the run's credential: it reaches only this run's calls, bound to its task (the parent), never
the principal's key, and it carries nothing but these tools. It is closed and removed when the run's CLI has
stopped, so a path saved by one run is useless after it.

Tools (`TOOLS`): `list_agents`, `send_to_agent(role, message, files?, wait?)`, `get_task(id)`,
`answer_task(id, message, wait?)`, `cancel_task(id)`. A refused call (`CallError`) is a tool result with
`isError` and the refusal's text, which the model reads; so are bad arguments. `files` are paths in the run's
workspace, attached to the child's message as files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from app.protocol.model import Part

from ..calls import AgentCalls, CallError
from ..calls_wire import agents_to_wire, child_to_wire
from ..jail import scratch
from ..jail.sandbox import IN_JAIL_TOOLS, IN_JAIL_TOOLS_RELAY, TOOLS_RELAY, TOOLS_SERVER_NAME, relay_python

log = logging.getLogger(__name__)

MAX_LINE = 16 << 20
"""The longest JSON-RPC message a connection takes (a call's files travel as paths, not bytes)."""
FILE_LIMIT = 10 << 20
"""The largest file `send_to_agent` attaches."""

_ID = {"type": "string", "description": "The id of a task this run started (send_to_agent returned it)."}
_WAIT = {
    "type": "boolean",
    "description": "Wait until the task ends or asks a question (default true); false returns at once.",
    "default": True,
}
TOOLS = (
    types.Tool(
        name="list_agents",
        description="The agents (roles) of this server you can hand work to: their skills and whether each "
        "is running now.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="send_to_agent",
        description="Start a task on another agent (by role), as a child of your task, and by default wait "
        "for its answer. If it asks a question (state input-required), answer with answer_task.",
        input_schema={
            "type": "object",
            "properties": {
                "role": {"type": "string", "description": "The role to send to (see list_agents)."},
                "message": {"type": "string", "description": "What to ask of it."},
                "files": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Paths of files in your workspace to attach.",
                },
                "wait": _WAIT,
            },
            "required": ["role", "message"],
        },
    ),
    types.Tool(
        name="get_task",
        description="A task you started, as it stands now: its state and its answer or question.",
        input_schema={"type": "object", "properties": {"id": _ID}, "required": ["id"]},
    ),
    types.Tool(
        name="answer_task",
        description="Answer the question of a task you started (state input-required).",
        input_schema={
            "type": "object",
            "properties": {"id": _ID, "message": {"type": "string"}, "wait": _WAIT},
            "required": ["id", "message"],
        },
    ),
    types.Tool(
        name="cancel_task",
        description="Cancel a task you started.",
        input_schema={"type": "object", "properties": {"id": _ID}, "required": ["id"]},
    ),
)


class BadArguments(Exception):
    """A tool's arguments are not what its schema asks for; the text says what is wrong."""


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise BadArguments(f"`{name}` must be a non-empty string")
    return value


def _wait(args: dict[str, Any]) -> bool:
    value = args.get("wait", True)
    if not isinstance(value, bool):
        raise BadArguments("`wait` must be true or false")
    return value


class ToolServer:
    """One run's tool server (module docstring): `start()`, the socket at `path`, `aclose()` at the end."""

    def __init__(self, calls: AgentCalls, workspace: Path) -> None:
        self.calls = calls
        self.workspace = workspace
        self._scratch = scratch.make("a2a-tools-")
        """Mode 0700 (mkdtemp's): only the server's user reaches the socket, and only through this path. Its
        owner record (a later start removes the folder should this process be killed) is beside `folder`."""
        self.folder = self._scratch / "run"
        """What the jail shows, read-only: the socket and a CLI's settings, not the record (a host pid)."""
        self.folder.mkdir(mode=0o700)
        self.path = self.folder / "tools.sock"
        self._listener: asyncio.AbstractServer | None = None
        self._sessions: set[asyncio.Task[None]] = set()
        self._mcp: Server[Any] = Server(
            TOOLS_SERVER_NAME,
            version="1",
            instructions="Hand work to the other agents of this server: list_agents, then send_to_agent.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    async def start(self) -> ToolServer:
        self._listener = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_LINE)
        self.path.chmod(0o600)
        return self

    async def aclose(self) -> None:
        """Stop listening, end every session (a call in progress is cancelled), remove the socket."""
        if self._listener is not None:
            self._listener.close()
        for session in list(self._sessions):
            session.cancel()
        if self._sessions:
            await asyncio.gather(*self._sessions, return_exceptions=True)
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
        scratch.remove(self._scratch)

    def relay(self, jailed: bool) -> list[str]:
        """The argv of the stdio MCP server a CLI starts: the relay to this socket, as the CLI sees both."""
        python = relay_python()[0]
        if jailed:
            return [python, "-I", "-S", IN_JAIL_TOOLS_RELAY, f"{IN_JAIL_TOOLS}/{self.path.name}"]
        return [python, "-I", "-S", str(TOOLS_RELAY), str(self.path)]

    def write(self, name: str, text: str, jailed: bool) -> str:
        """A file beside the socket (a CLI's settings that name the server), read-only in the jail; its path
        as the CLI sees it."""
        path = self.folder / name
        path.write_text(text)
        path.chmod(0o600)
        return f"{IN_JAIL_TOOLS}/{name}" if jailed else str(path)

    # ---- one connection: an MCP session -------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await self._session(reader, writer)
        except Exception:
            log.exception("tool server session failed")
        finally:
            self._sessions.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The SDK's server over the socket's lines, as its stdio transport does over a process's pipes."""
        to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)

        async def read() -> None:
            async with to_server:
                while True:
                    try:
                        line = await reader.readline()
                    except (ValueError, asyncio.LimitOverrunError, ConnectionError):
                        return  # a line past MAX_LINE, or the peer gone: the session ends
                    if not line:
                        return
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:  # the SDK would drop it unanswered: JSON-RPC's error instead
                        writer.write(_refusal(line))
                        continue
                    await to_server.send(SessionMessage(message))

        async def write() -> None:
            async with from_server:
                async for item in from_server:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(data.encode() + b"\n")
                    await writer.drain()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            await self._mcp.run(server_reads, server_writes, self._mcp.create_initialization_options())
            tg.cancel_scope.cancel()

    # ---- the tools ------------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = self._handlers().get(params.name)
        if handler is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:
            result = await handler(params.arguments or {})
        except (CallError, BadArguments) as exc:
            return _error(str(exc))
        except Exception:
            log.exception("tool %s failed", params.name)
            return _error(f"{params.name} failed on the server; try again later")
        text = json.dumps(result, ensure_ascii=False)
        structured = result if isinstance(result, dict) else {"agents": result}
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "list_agents": self._list_agents,
            "send_to_agent": self._send,
            "get_task": self._get,
            "answer_task": self._answer,
            "cancel_task": self._cancel,
        }

    async def _list_agents(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return agents_to_wire(await self.calls.list_agents())

    async def _send(self, args: dict[str, Any]) -> dict[str, Any]:
        role, text, wait = _text(args, "role"), _text(args, "message"), _wait(args)
        files = args.get("files") or []
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise BadArguments("`files` must be a list of paths in your workspace")
        parts = [self._file(f) for f in files]
        return child_to_wire(await self.calls.send_to_agent(role, text, parts, wait))

    async def _get(self, args: dict[str, Any]) -> dict[str, Any]:
        return child_to_wire(await self.calls.get_task(_text(args, "id")))

    async def _answer(self, args: dict[str, Any]) -> dict[str, Any]:
        task_id, text, wait = _text(args, "id"), _text(args, "message"), _wait(args)
        return child_to_wire(await self.calls.answer_task(task_id, text, wait))

    async def _cancel(self, args: dict[str, Any]) -> dict[str, Any]:
        return child_to_wire(await self.calls.cancel_task(_text(args, "id")))

    def _file(self, name: str) -> Part:
        """A file of the workspace as a file part; BadArguments for anything outside it or too large. The
        check is made on the file opened (its /proc path), so a link swapped in meanwhile leads nowhere."""
        root = self.workspace.resolve()
        try:
            fd = os.open(root / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            raise BadArguments(f"{name}: no such file in your workspace") from None
        try:
            opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
            if root not in opened.parents:
                raise BadArguments(f"{name}: not a file in your workspace")
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise BadArguments(f"{name}: not a file")
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read(FILE_LIMIT + 1)
            if max(info.st_size, len(raw)) > FILE_LIMIT:
                raise BadArguments(f"{name}: larger than {FILE_LIMIT >> 20} MiB")
        finally:
            os.close(fd)
        media_type = mimetypes.guess_type(opened.name)[0] or "application/octet-stream"
        return Part(raw=raw, media_type=media_type, filename=opened.name)


def _refusal(line: bytes) -> bytes:
    """The answer to a line that is not a JSON-RPC message: a parse error (-32700), or an invalid request
    (-32600) naming the id it gave, if any."""
    try:
        obj = json.loads(line)
    except ValueError:
        code, message, request_id = types.PARSE_ERROR, "Parse error: not JSON", None
    else:
        request_id = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            request_id = None
        code, message = types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message"
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(error).encode() + b"\n"


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
