"""Repository in, change out, through the official clients: every binding in both protocol versions hands
back the change artifacts, and the client's own types read them.

One real server (SQLite, gRPC on a free port) runs the `ndjson` adapter with the fake coding agent
(tests/support/fakes/repo_agent.py) on a bare repository the module made. Each client sends `EDIT` with
`metadata.repository` naming it: the Python `a2a-sdk` over JSON-RPC, HTTP+JSON and gRPC, each in v1.0 and
in v0.3 (its compat transports), and `@a2a-js/sdk` over the same three (tests/support/js/interop.mjs, steps
`repository` and `repository_stream`). The `changes.diff` file part's bytes, decoded by the client, must
apply (`git apply --check`) at the base the `changes` data part names and rebuild the agent's tree; the data
part lists the files the agent touched. A streamed send must deliver the same artifacts as updates.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.grpc import GrpcTransport
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.client.transports.rest import RestTransport
from a2a.compat.v0_3.grpc_transport import CompatGrpcTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.helpers import get_artifact_text
from a2a.types import Artifact, GetTaskRequest, Message, Part, StreamResponse, Task, TaskState
from a2a.utils.constants import TransportProtocol
from google.protobuf import json_format

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from tests.agents.repos.conftest import git
from tests.cli.test_repository import make_origin
from tests.conftest import make_server
from tests.interop.test_interop_js import (
    Run,
    Variant,
    node,  # noqa: F401 - the fixture: node with tests/support/js's packages installed
    run_interop,
)
from tests.interop.test_interop_sdk import WAIT_S, kind, only_v03, send_request, user_message
from tests.support.clis import FAKES
from tests.support.server import ServerProcess, free_port

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
AGENT = shlex.join([PYTHON, str(FAKES / "repo_agent.py")])
DIFF_TYPE = "text/x-diff"
CHANGE = ["changes", "changes.diff", "turn-1.diff"]
"""The artifacts a first turn that changed files publishes, in the order the server sends them."""
FILES = [("blob.bin", "added"), ("notes.md", "added"), ("old.txt", "deleted"), ("src/app.py", "modified")]
"""What `EDIT` changes, as the `changes` data part lists it (path, status), sorted by path."""
ENDED = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_INPUT_REQUIRED)

BINDINGS = {
    "jsonrpc": TransportProtocol.JSONRPC,
    "rest": TransportProtocol.HTTP_JSON,
    "grpc": TransportProtocol.GRPC,
}
TRANSPORTS = {
    ("jsonrpc", "1.0"): JsonRpcTransport,
    ("jsonrpc", "0.3"): CompatJsonRpcTransport,
    ("rest", "1.0"): RestTransport,
    ("rest", "0.3"): CompatRestTransport,
    ("grpc", "1.0"): GrpcTransport,
    ("grpc", "0.3"): CompatGrpcTransport,
}
CLIENTS = [pytest.param(key, id=f"{key[0]}-v{key[1].replace('.', '')}") for key in TRANSPORTS]


@dataclass
class Served:
    server: ServerProcess
    root: Path
    bare: Path

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def workspace(self, context_id: str) -> Path:
        return self.root / "ws" / principal_key(ANONYMOUS) / context_id


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One server for the module: the ndjson repo agent, REPO_ALLOW holding the module's bare repository,
    gRPC on a free port."""
    tmp = tmp_path_factory.mktemp("repo-clients")
    allowed = tmp / "remote"
    make_origin(allowed / "project.git", tmp / "work")
    server = await make_server(
        "sqlite",
        tmp,
        AGENT_ADAPTER="ndjson",
        AGENT_COMMAND=AGENT,
        AGENT_WORKSPACE_ROOT=str(tmp / "ws"),
        AGENT_SANDBOX_READ=str(FAKES),
        REPO_ALLOW=str(allowed),
        REPO_CACHE_ROOT=str(tmp / "cache"),
        GRPC_PORT=str(free_port()),
    )
    try:
        yield Served(server, tmp, allowed / "project.git")
    finally:
        server.stop()


# ---- the Python SDK -----------------------------------------------------------------------------


@asynccontextmanager
async def sdk_client(served: Served, key: tuple[str, str], *, streaming: bool) -> AsyncIterator[Client]:
    """An SDK client made from our agent card that may only use the binding, in the protocol version (v0.3:
    the card cut to its v0.3 interfaces, as a v0.3-only client sees it)."""
    binding, protocol = key
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=streaming,
            supported_protocol_bindings=[BINDINGS[binding]],
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        card = await A2ACardResolver(http, served.server.base_url).get_agent_card()
        client = ClientFactory(config).create(only_v03(card) if protocol == "0.3" else card)
        assert type(client._transport) is TRANSPORTS[key]  # type: ignore[attr-defined]
        try:
            yield client
        finally:
            await client.close()


def repo_message(served: Served, text: str) -> Message:
    msg = user_message(text)
    msg.metadata.update({"repository": {"url": served.url, "ref": "main"}})
    return msg


async def until_ended(client: Client, task: Task) -> Task:
    """The task once its turn ended (a blocking send answers then; this also covers one that did not)."""
    async with asyncio.timeout(WAIT_S):
        while task.status.state not in ENDED:
            await asyncio.sleep(0.1)
            task = await client.get_task(GetTaskRequest(id=task.id))
    return task


def named(artifacts: list[Artifact], name: str) -> Artifact:
    found = [a for a in artifacts if a.name == name]
    assert len(found) == 1, [a.name for a in artifacts]
    return found[0]


def summary_of(artifact: Artifact) -> dict[str, Any]:
    """The `changes` artifact's one data part, as JSON."""
    (part,) = artifact.parts
    assert part.WhichOneof("content") == "data", part
    return json_format.MessageToDict(part.data)


def patch_of(artifact: Artifact) -> bytes:
    """A diff artifact's one file part: its bytes, checked to say what they are."""
    (part,) = artifact.parts
    assert isinstance(part, Part) and part.WhichOneof("content") == "raw", part
    assert (part.media_type, part.filename) == (DIFF_TYPE, artifact.name)
    return part.raw


def check_change(served: Served, summary: dict[str, Any], patch: bytes, context_id: str, where: Path) -> None:
    """The patch applies at the summary's base and rebuilds the agent's tree; the summary lists the files."""
    assert sorted((f["path"], f["status"]) for f in summary["files"]) == FILES
    assert summary["base"] == git("rev-parse", "main", cwd=served.bare)
    ws = served.workspace(context_id)
    assert summary["head"] == git("rev-parse", "HEAD", cwd=ws)
    git("clone", "--quiet", str(served.bare), str(where))
    git("checkout", "--quiet", summary["base"], cwd=where)
    git("apply", "--check", cwd=where, input=patch)
    git("apply", "--index", cwd=where, input=patch)
    assert git("write-tree", cwd=where) == git("rev-parse", "HEAD^{tree}", cwd=ws)


@pytest.mark.parametrize("key", CLIENTS)
async def test_the_sdk_reads_the_change_from_a_send(
    served: Served, key: tuple[str, str], tmp_path: Path
) -> None:
    async with sdk_client(served, key, streaming=False) as client:
        events = [e async for e in client.send_message(send_request(repo_message(served, "EDIT")))]
        assert [kind(e) for e in events] == ["task"], events
        task = await until_ended(client, events[0].task)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
    assert [a.name for a in task.artifacts if a.name in CHANGE] == CHANGE
    summary = summary_of(named(task.artifacts, "changes"))
    patch = patch_of(named(task.artifacts, "changes.diff"))
    assert patch_of(named(task.artifacts, "turn-1.diff")) == patch
    check_change(served, summary, patch, task.context_id, tmp_path / "clone")


@pytest.mark.parametrize("key", CLIENTS)
async def test_the_sdk_reads_the_change_from_a_stream(
    served: Served, key: tuple[str, str], tmp_path: Path
) -> None:
    async with sdk_client(served, key, streaming=True) as client:
        events: list[StreamResponse] = []
        async with asyncio.timeout(WAIT_S):
            async for ev in client.send_message(send_request(repo_message(served, "EDIT"))):
                events.append(ev)
        assert kind(events[0]) == "task", events[0]
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    updates = [e.artifact_update for e in events if kind(e) == "artifact_update"]
    assert all(u.task_id == task.id for u in updates)
    by_name = {u.artifact.name: u.artifact for u in updates if u.artifact.name in CHANGE}
    last = events[-1]
    assert kind(last) == "status_update" and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    order = [u.artifact.name for u in updates if u.artifact.name in CHANGE]
    assert order == CHANGE, "each change artifact once, whole, before the last status"
    patch = patch_of(by_name["changes.diff"])
    assert patch == patch_of(named(task.artifacts, "changes.diff")), "the stream's patch is the task's"
    assert summary_of(by_name["changes"]) == summary_of(named(task.artifacts, "changes"))
    check_change(served, summary_of(by_name["changes"]), patch, task.context_id, tmp_path / "clone")


@pytest.mark.parametrize("key", CLIENTS)
async def test_a_file_the_sdk_attaches_reaches_the_agent_as_it_was(
    served: Served, key: tuple[str, str]
) -> None:
    """The way in: a file part the SDK sends is written to the workspace byte for byte (v0.3 HTTP+JSON and
    gRPC carry it as the SDK's base64 text in the proto's bytes)."""
    content = "QUJD\nthe spec, line two\n"
    msg = user_message("FILES")
    msg.parts.append(Part(raw=content.encode(), media_type="text/plain", filename="docs/spec.txt"))
    async with sdk_client(served, key, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(msg))]
        task = await until_ended(client, event.task)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
    said = get_artifact_text(named(task.artifacts, "assistant-response"))
    assert json.loads(said.split("worked in")[0]) == {"attachments/docs/spec.txt": content}
    assert (served.workspace(task.context_id) / "attachments" / "docs" / "spec.txt").read_text() == content


# ---- the JavaScript SDK -------------------------------------------------------------------------

JS_STEPS = ("--steps", "repository,repository_stream", "--protocol")
JS_VARIANTS = [
    pytest.param(Variant(("--transport", t, *JS_STEPS, v), t, v), id=f"{name}-v{v.replace('.', '')}")
    for name, t in (("jsonrpc", "JSONRPC"), ("rest", "HTTP+JSON"), ("grpc", "GRPC"))
    for v in ("1.0", "0.3")
]


@pytest.fixture(scope="module", params=JS_VARIANTS)
async def js_run(request: pytest.FixtureRequest, served: Served, node: str) -> Run:  # noqa: F811
    """One run of the repository steps with the variant's client."""
    variant: Variant = request.param
    variant = Variant((*variant.args, "--repository", served.url), variant.transport, variant.version)
    return await run_interop(node, served.server.base_url, variant)


def js_proto_v03(run: Run) -> bool:
    """@a2a-js/sdk's v0.3 HTTP+JSON and gRPC transports read the v0.3 proto's `file_with_bytes` as the file's
    own bytes, where the Python, Java and Go SDKs (and the server) put the file's base64 text there; and they
    drop the file's name."""
    return run.variant.version == "0.3" and run.variant.transport in ("HTTP+JSON", "GRPC")


def js_named(artifacts: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [a for a in artifacts if a["name"] == name]
    assert len(found) == 1, [a["name"] for a in artifacts]
    return found[0]


def js_summary(artifact: dict[str, Any]) -> dict[str, Any]:
    (part,) = artifact["parts"]
    assert part["kind"] == "data", part
    return part["data"]


def js_patch(run: Run, artifact: dict[str, Any]) -> bytes:
    """A diff artifact's one file part as the JS client typed it: its bytes, checked to say what they are."""
    (part,) = artifact["parts"]
    assert part["kind"] == "raw" and part["mediaType"] == DIFF_TYPE, part
    raw = base64.b64decode(part["bytes"])
    if js_proto_v03(run):
        assert part["filename"] == "", part
        return base64.b64decode(raw, validate=True)
    assert part["filename"] == artifact["name"], part
    return raw


def test_the_js_client_reads_the_change_from_a_send(js_run: Run, served: Served, tmp_path: Path) -> None:
    assert js_run.client["transport"] == js_run.variant.transport
    task = js_run.step("repository")["task"]
    artifacts = task["artifacts"]
    assert [a["name"] for a in artifacts if a["name"] in CHANGE] == CHANGE
    patch = js_patch(js_run, js_named(artifacts, "changes.diff"))
    assert js_patch(js_run, js_named(artifacts, "turn-1.diff")) == patch
    summary = js_summary(js_named(artifacts, "changes"))
    check_change(served, summary, patch, task["contextId"], tmp_path / "clone")


def test_the_js_client_reads_the_change_from_a_stream(js_run: Run, served: Served, tmp_path: Path) -> None:
    step = js_run.step("repository_stream")
    events, task = step["events"], step["task"]
    assert events[0]["kind"] == "task" and events[0]["id"] == task["id"]
    updates = [e for e in events if e["kind"] == "artifact"]
    assert all(u["taskId"] == task["id"] for u in updates)
    streamed = [u["artifact"] for u in updates if u["artifact"]["name"] in CHANGE]
    assert [a["name"] for a in streamed] == CHANGE, "each change artifact once, whole, before the last status"
    assert (events[-1]["kind"], events[-1]["state"]) == ("status", "TASK_STATE_COMPLETED")
    by_name = {a["name"]: a for a in streamed}
    patch = js_patch(js_run, by_name["changes.diff"])
    assert patch == js_patch(js_run, js_named(task["artifacts"], "changes.diff")), (
        "the stream's is the task's"
    )
    summary = js_summary(by_name["changes"])
    assert summary == js_summary(js_named(task["artifacts"], "changes"))
    check_change(served, summary, patch, task["contextId"], tmp_path / "clone")
