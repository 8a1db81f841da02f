"""The official `mcp` client against a server's `/mcp`, and how the tests read its tools' answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult

MODES = ["legacy", "2026-07-28"]
"""The client's eras: the initialize handshake (served stateless), and the per-request protocol."""


@asynccontextmanager
async def mcp_client(
    base_url: str, headers: dict[str, str] | None = None, mode: str = "legacy"
) -> AsyncIterator[Client]:
    """A connected client of `base_url`/mcp sending `headers` (a credential) with every request."""
    async with create_mcp_http_client(headers=headers or {}) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
            yield client


def answer(result: CallToolResult) -> dict[str, Any]:
    """A tool's answer: its text is the JSON of its structured content."""
    assert not result.is_error, result.content
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    return body


def refusal(result: CallToolResult) -> str:
    """A tool error's text."""
    assert result.is_error, result
    return result.content[0].text  # type: ignore[union-attr]
