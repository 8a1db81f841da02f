"""`/mcp`: the server as an MCP server for hosts (Claude Desktop, Claude Code, IDEs, other agents' MCP
clients), streamable HTTP on the official `mcp` SDK (`mcp_tools.py`; what its tools do: `mcp_tasks.py`).

It sits behind the same edge as the A2A routes: the guard has authenticated the caller (API key or JWT) before
the SDK sees the request, and every tool acts as that principal. The SDK runs stateless: no session is kept
between requests, so any replica behind a load balancer answers any call, and a tool that waits sends its
progress on the response stream of its own request.

The SDK is loaded when `/mcp` is first asked, not at start-up: importing it costs about as much again as the
rest of the app, which a server no host talks to need not pay. Its request handling then runs in a task of the
app's lifespan (`run`), which owns the SDK's task group from its start to the app's shutdown.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)


class McpEndpoint:
    """The ASGI app at `/mcp`; `run` while the app serves."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        self._handle: ASGIApp | None = None
        self._wanted: asyncio.Event | None = None
        self._ready: asyncio.Event | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """While the app serves: a task that loads the SDK on the first request and serves until shutdown."""
        self._wanted, self._ready, stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(self._hold(stop), name="mcp")
        try:
            yield
        finally:
            stop.set()
            self._wanted.set()
            await asyncio.gather(holder, return_exceptions=True)
            self._handle = self._wanted = self._ready = None

    async def _hold(self, stop: asyncio.Event) -> None:
        assert self._wanted is not None and self._ready is not None
        await self._wanted.wait()
        try:
            if stop.is_set():
                return
            tools = await asyncio.to_thread(importlib.import_module, f"{__package__}.mcp_tools")
            manager: Any = tools.manager(self.max_body_bytes)
            async with manager.run():
                self._handle = manager.handle_request
                self._ready.set()
                await stop.wait()
        except Exception:
            log.exception("/mcp could not start")
            raise
        finally:
            self._handle = None
            self._ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._handle is None:
            if self._wanted is None or self._ready is None:
                raise RuntimeError("/mcp serves only while the app runs (its lifespan)")
            self._wanted.set()
            await self._ready.wait()
        if self._handle is None:
            raise RuntimeError("/mcp could not start; see the log")
        await self._handle(scope, receive, send)
