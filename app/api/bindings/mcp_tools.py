"""The MCP server `/mcp` serves (`mcp.py` loads it when first asked): the tools' names, argument schemas and
descriptions, the `task://{task_id}` template, and the turning of what the tools do (`mcp_tasks.py`) into MCP
results, on the official SDK's low-level `Server` and its streamable-HTTP transport.

A refused call (bad arguments, an unknown role or task, a limit, a repository REPO_ALLOW does not allow) is a
tool error whose text says why, never an HTTP error; an unexpected failure is logged and shown as the API
shows it (`faults.unexpected`). Another principal's task is "not found", as in the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from app.protocol import protojson_v10
from app.protocol.errors import A2AError, InvalidParamsError, UnauthenticatedError
from app.protocol.model import TaskState

from ..faults import unexpected
from .mcp_tasks import MAX_LIST, FileIn, Host, Progress, as_json

TASK_URI = "task://{task_id}"
TASK_SCHEME = "task://"
INSTRUCTIONS = (
    "Coding agents behind an A2A server, one per role. list_agents shows the roles; run_task starts a "
    "task on one and, with wait, follows it until it ends or asks a question (input-required: an approval "
    "asks y/n); answer_task answers it. get_task, list_tasks and cancel_task act on your own tasks only. "
    "The resource task://{task_id} reads a task in full, as the A2A API's GetTask returns it."
)


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _RunTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(min_length=1, max_length=128, description="The role to run it (see list_agents)")
    message: str = Field(min_length=1, description="What the agent is asked to do")
    files: list[FileIn] = Field(default_factory=list, description="Files for the agent")
    context_id: str | None = Field(
        default=None,
        max_length=256,
        description="A context of an earlier task, to continue its conversation and workspace",
    )
    repository: str | dict[str, Any] | None = Field(
        default=None,
        description=(
            "The repository the agent works on (metadata.repository): its URL, or an object such as "
            '{"url": ..., "branch": ..., "push": true}; only sources the server allows (REPO_ALLOW)'
        ),
    )
    wait: bool = Field(
        default=True,
        description="Wait until the task ends or asks a question (progress is notified meanwhile); "
        "false: return at once with the task id",
    )


class _TaskId(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str = Field(min_length=1, max_length=256, description="The task's id")


class _Answer(_TaskId):
    message: str = Field(min_length=1, description="The answer; for an approval, y or n")
    wait: bool = Field(default=True, description="Wait until the task ends or asks again")


class _ListTasks(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str | None = Field(default=None, max_length=128, description="Only this role's tasks")
    state: (
        Literal[
            "submitted",
            "working",
            "input-required",
            "auth-required",
            "completed",
            "canceled",
            "failed",
            "rejected",
        ]
        | None
    ) = Field(default=None, description="Only tasks in this state")
    limit: int = Field(default=20, ge=1, le=MAX_LIST, description="At most this many, newest first")


Run = Callable[[Host, Any, Progress], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _Tool:
    description: str
    args: type[BaseModel]
    run: Run
    read_only: bool = False
    destructive: bool = False


async def _list_agents(host: Host, _: _NoArgs, progress: Progress) -> Any:
    return {"agents": as_json(await host.list_agents())}


async def _run_task(host: Host, a: _RunTask, progress: Progress) -> Any:
    return as_json(await host.run(a.role, a.message, a.files, a.context_id, a.repository, a.wait, progress))


async def _get_task(host: Host, a: _TaskId, progress: Progress) -> Any:
    return as_json(await host.get(a.task_id))


async def _answer_task(host: Host, a: _Answer, progress: Progress) -> Any:
    return as_json(await host.answer(a.task_id, a.message, a.wait, progress))


async def _cancel_task(host: Host, a: _TaskId, progress: Progress) -> Any:
    return as_json(await host.cancel(a.task_id))


async def _list_tasks(host: Host, a: _ListTasks, progress: Progress) -> Any:
    state = TaskState(a.state) if a.state is not None else None
    return {"tasks": as_json(await host.list(a.role, state, a.limit))}


TOOLS: dict[str, _Tool] = {
    "list_agents": _Tool(
        "The roles of this server: each one's name, description, skills, and whether an agent of it is "
        "running now (available).",
        _NoArgs,
        _list_agents,
        read_only=True,
    ),
    "run_task": _Tool(
        "Start a task on a role: the agent gets the message (and files, and the repository when given). "
        "Returns the task id, its state and its text: the answer once it ended, its question when it asks "
        "(input-required; answer with answer_task).",
        _RunTask,
        _run_task,
    ),
    "get_task": _Tool(
        "A task of yours as it stands: state, text (answer or question), artifacts, usage.",
        _TaskId,
        _get_task,
        read_only=True,
    ),
    "answer_task": _Tool(
        "Answer a task that asks (input-required); an approval takes y or n.",
        _Answer,
        _answer_task,
    ),
    "cancel_task": _Tool(
        "Cancel a task of yours that has not ended.", _TaskId, _cancel_task, destructive=True
    ),
    "list_tasks": _Tool(
        "Your tasks, newest first, of one role or all, in one state or any.",
        _ListTasks,
        _list_tasks,
        read_only=True,
    ),
}


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.setdefault("properties", {})
    return schema


TOOL_LIST = ListToolsResult(
    tools=[
        Tool(
            name=name,
            description=tool.description,
            input_schema=_schema(tool.args),
            annotations=ToolAnnotations(
                read_only_hint=tool.read_only, destructive_hint=tool.destructive, open_world_hint=False
            ),
        )
        for name, tool in TOOLS.items()
    ]
)


def _host(ctx: ServerRequestContext[Any, Any]) -> Host:
    """The caller of this MCP request: the HTTP request the transport handed over, guarded by the edge."""
    request = ctx.request
    if not isinstance(request, Request):
        raise UnauthenticatedError()
    return Host(request)


def _refused(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _problems(exc: ValidationError) -> str:
    """Pydantic's complaints in one line, each naming its argument (never the value sent)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
) -> ListToolsResult:
    return TOOL_LIST


async def _call_tool(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
    tool = TOOLS.get(params.name)
    if tool is None:
        return _refused(f"No tool named {params.name!r}; the tools are: {', '.join(TOOLS)}")
    try:
        args = tool.args.model_validate(params.arguments or {})
    except ValidationError as exc:
        return _refused(f"{params.name}: {_problems(exc)}")

    async def progress(seq: float, note: str) -> None:
        await ctx.session.report_progress(seq, None, note)

    try:
        found = await tool.run(_host(ctx), args, progress)
    except A2AError as exc:
        return _refused(exc.message)
    except Exception as exc:
        return _refused(unexpected(exc, f"MCP {params.name}").message)
    text = orjson.dumps(found).decode()
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=found,
    )


async def _list_resources(
    ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
) -> ListResourcesResult:
    return ListResourcesResult(resources=[])


async def _list_templates(
    ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(
        resource_templates=[
            ResourceTemplate(
                uri_template=TASK_URI,
                name="task",
                description="A task of yours in full (status, history, artifacts, metadata), as GetTask "
                "returns it in A2A v1.0's JSON",
                mime_type="application/json",
            )
        ]
    )


async def _read_resource(
    ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
) -> ReadResourceResult:
    uri = str(params.uri)
    task_id = uri.removeprefix(TASK_SCHEME)
    try:
        if not uri.startswith(TASK_SCHEME) or not task_id:
            raise InvalidParamsError(f"No resource {uri!r}: this server has task://{{task_id}} only")
        _, task = await _host(ctx).find(task_id, None)
    except A2AError as exc:
        raise MCPError(INVALID_PARAMS, exc.message, {"uri": uri}) from None
    except Exception as exc:
        raise MCPError(INTERNAL_ERROR, unexpected(exc, "MCP resources/read").message, {"uri": uri}) from None
    body = orjson.dumps(protojson_v10.encode_task(task)).decode()
    return ReadResourceResult(
        contents=[TextResourceContents(uri=uri, text=body, mime_type="application/json")]
    )


def manager(max_body_bytes: int) -> StreamableHTTPSessionManager:
    """The SDK's request handling for these tools: stateless, every request a self-contained exchange."""
    server: Server[Any] = Server(
        "a2a-coding-agents",
        instructions=INSTRUCTIONS,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_list_resource_templates=_list_templates,
        on_read_resource=_read_resource,
    )
    return StreamableHTTPSessionManager(server, stateless=True, max_request_body_size=max_body_bytes)
