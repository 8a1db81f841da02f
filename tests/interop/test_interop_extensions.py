"""Interop: extensions through the official Python client (`a2a-sdk` 1.3.0), every binding, both versions.

Against the server of tests/e2e/test_extensions.py (its default role: an agent declaring a required and an
optional extension, CARD_EXTENSIONS adding another of each). The client is made from our card (resolved
without naming any extension: discovery needs none) with one binding allowed: JSON-RPC, HTTP+JSON or gRPC,
in protocol 1.0 or 0.3 (the card filtered to its v0.3 interfaces: the compat transports, which send
`X-A2A-Extensions` beside `A2A-Extensions`). Without the required extensions the SDK raises the error it
maps -32008 / EXTENSION_SUPPORT_REQUIRED to; with them (`with_a2a_extensions` service parameters) the task
completes, the agent saw the activated set, and over HTTP the response echoes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types import ExtensionSupportRequiredError, TaskState
from a2a.utils.constants import TransportProtocol
from google.protobuf import json_format

from tests.e2e.test_extensions import ALICE, DECLARED, OP_OPTIONAL, REQUIRED, UNKNOWN, ext_server  # noqa: F401
from tests.interop.test_interop_grpc import channel
from tests.interop.test_interop_sdk import WAIT_S, collect, only_v03, send_request, user_message
from tests.support.auth import KEYS
from tests.support.server import ServerProcess

BINDINGS = {
    "jsonrpc": TransportProtocol.JSONRPC,
    "rest": TransportProtocol.HTTP_JSON,
    "grpc": TransportProtocol.GRPC,
}


@asynccontextmanager
async def sdk_client(
    server: ServerProcess, binding: str, protocol: str, streaming: bool, echoes: list[str | None]
) -> AsyncIterator[Client]:
    async def record(response: httpx.Response) -> None:
        if response.request.method == "POST":
            echoes.append(response.headers.get("a2a-extensions"))

    async with httpx.AsyncClient(timeout=WAIT_S, headers=ALICE, event_hooks={"response": [record]}) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=streaming,
            supported_protocol_bindings=[BINDINGS[binding]],
            grpc_channel_factory=lambda url: channel(url, {"x-api-key": KEYS["alice"]}),
        )
        card = await A2ACardResolver(http, server.base_url).get_agent_card()
        client = ClientFactory(config).create(only_v03(card) if protocol == "0.3" else card)
        try:
            yield client
        finally:
            await client.close()


def context(uris: list[str]) -> ClientCallContext:
    return ClientCallContext(service_parameters=ServiceParametersFactory.create([with_a2a_extensions(uris)]))


async def whoami(client: Client, ctx: ClientCallContext | None) -> dict[str, Any]:
    """What the agent was told, from the `whoami` artifact of the completed task."""
    events = await collect(client.send_message(send_request(user_message("whoami")), context=ctx))
    tasks = [e.task for e in events if e.HasField("task")]
    updates = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    if tasks and tasks[-1].status.state == TaskState.TASK_STATE_COMPLETED and tasks[-1].artifacts:
        artifacts = list(tasks[-1].artifacts)
    else:
        artifacts = updates
    (artifact,) = [a for a in artifacts if a.name == "whoami"]
    data = json_format.MessageToDict(artifact.parts[0].data)
    return data.get("data", data)


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_the_sdk_is_refused_without_and_served_with_the_required_extensions(
    ext_server: ServerProcess,  # noqa: F811
    binding: str,
    protocol: str,
    streaming: bool,
) -> None:
    echoes: list[str | None] = []
    async with sdk_client(ext_server, binding, protocol, streaming, echoes) as client:
        with pytest.raises(ExtensionSupportRequiredError) as caught:
            await whoami(client, None)
        if binding != "grpc":  # the SDK drops a gRPC ErrorInfo's metadata; tests/e2e checks it there
            assert (caught.value.data or {}).get("extensions") == ",".join(
                REQUIRED["coder"]
            ) or protocol == "0.3"
        for uri in REQUIRED["coder"]:
            assert uri in caught.value.message

        asked = [*REQUIRED["coder"], OP_OPTIONAL, UNKNOWN]
        info = await whoami(client, context(asked))
    active = [u for u in sorted(asked) if u in DECLARED["coder"]]  # with_a2a_extensions sorts them
    assert info["activeExtensions"] == active
    if binding != "grpc":
        assert echoes[-1] == ",".join(active)
