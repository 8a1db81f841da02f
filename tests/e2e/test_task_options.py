"""A task's own model and timeout within its role's limits (`metadata.model`, `metadata.timeoutS`), over a
real server process.

Two roles of the scripted agent: `coder` (the default) with `model` big-model, `models` [small-model] and a
60 s timeout, and `reviewer`, which offers no choice of model. A model outside the role's list, a timeout
above the role's and a value of the wrong type are refused with -32602 naming the limit on every binding
(JSON-RPC and HTTP+JSON in both versions, gRPC in both) and nothing is stored; a task keeps its choice for
every turn (the scripted agent's session names the model its run was given), a later message may repeat it
but not change it; and a task's lower timeout ends its run as the role's timeout would. The model reaching
a real CLI: tests/cli/test_task_options_cli.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format, struct_pb2

from tests.conftest import make_server
from tests.support.clis import status_text, wait_until_stopped
from tests.support.rpc import call, result, text_message
from tests.support.server import ServerProcess, free_port

AGENTS = {
    "coder": {"adapter": "scripted", "model": "big-model", "models": ["small-model"], "timeout_s": 60},
    "reviewer": {"adapter": "scripted"},
}
BINDINGS = ("jsonrpc-0.3", "jsonrpc-1.0", "rest-0.3", "rest-1.0", "grpc-0.3", "grpc-1.0")
REFUSED = {
    "an unlisted model": ({"model": "gpt-9"}, "allows the models big-model, small-model"),
    "a model of the wrong type": ({"model": ["small-model"]}, "allows the models big-model, small-model"),
    "a timeout above the role's": ({"timeoutS": 61}, "at most 60, the timeout of the role 'coder'"),
    "a timeout of 0": ({"timeoutS": 0}, "at most 60, the timeout of the role 'coder'"),
    "a timeout as text": ({"timeoutS": "30"}, "must be a number of seconds"),
    "a timeout as a boolean": ({"timeoutS": True}, "must be a number of seconds"),
}


@pytest.fixture(scope="module")
async def options_server(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    port = free_port()
    srv = await make_server(
        "sqlite", tmp_path_factory.mktemp("task-options"), AGENTS=json.dumps(AGENTS), GRPC_PORT=str(port)
    )
    srv.grpc_port = port  # type: ignore[attr-defined]
    yield srv
    srv.stop()


@pytest.fixture
async def http(options_server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=options_server.base_url, timeout=30) as c:
        yield c


async def _refusal(server: ServerProcess, http: httpx.AsyncClient, binding: str, meta: dict, ctx: str) -> str:
    """Send a message with `meta` in its metadata by `binding`; the refusal's text (after checking that it
    is the binding's form of -32602)."""
    mid = str(uuid.uuid4())
    if binding.startswith("grpc"):
        return await _grpc_refusal(server, binding.endswith("1.0"), meta, ctx, mid)
    if binding == "jsonrpc-0.3":
        message = text_message("hello", messageId=mid, contextId=ctx, metadata=meta)
        resp = await http.post(
            "/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        )
        assert resp.status_code == 200 and resp.json()["error"]["code"] == -32602, resp.text
        return resp.json()["error"]["message"]
    v10 = {
        "messageId": mid,
        "role": "ROLE_USER",
        "parts": [{"text": "hello"}],
        "contextId": ctx,
        "metadata": meta,
    }
    if binding == "jsonrpc-1.0":
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": v10}}
        resp = await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
        error = resp.json()["error"]
        assert resp.status_code == 200 and error["code"] == -32602, resp.text
        assert error["data"][0]["reason"] == "INVALID_PARAMS"
        return error["message"]
    if binding == "rest-1.0":
        resp = await http.post(
            "/a2a/rest/message:send", json={"message": v10}, headers={"A2A-Version": "1.0"}
        )
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT" and error["details"][0]["reason"] == "INVALID_PARAMS"
        return error["message"]
    v03 = {
        "messageId": mid,
        "role": "ROLE_USER",
        "content": [{"text": "hello"}],
        "contextId": ctx,
        "metadata": meta,
    }
    resp = await http.post("/a2a/rest/v1/message:send", json={"message": v03})
    assert resp.status_code == 422 and resp.json()["code"] == -32602, resp.text
    return resp.json()["message"]


async def _grpc_refusal(server: ServerProcess, v10: bool, meta: dict, ctx: str, mid: str) -> str:
    metadata = json_format.ParseDict(meta, struct_pb2.Struct())
    if v10:
        message = a2a_pb2.Message(
            message_id=mid,
            context_id=ctx,
            role=a2a_pb2.ROLE_USER,
            parts=[a2a_pb2.Part(text="hello")],
            metadata=metadata,
        )
        request: Any = a2a_pb2.SendMessageRequest(message=message)
    else:
        message3 = a2a_v0_3_pb2.Message(
            message_id=mid,
            context_id=ctx,
            role=a2a_v0_3_pb2.ROLE_USER,
            content=[a2a_v0_3_pb2.Part(text="hello")],
            metadata=metadata,
        )
        request = a2a_v0_3_pb2.SendMessageRequest(request=message3)
    stub_of = a2a_pb2_grpc.A2AServiceStub if v10 else a2a_v0_3_pb2_grpc.A2AServiceStub
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:  # type: ignore[attr-defined]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub_of(channel).SendMessage(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value.details() or ""


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_option_beyond_the_roles_limits_is_refused_on_every_binding_and_stores_nothing(
    options_server: ServerProcess, http: httpx.AsyncClient, binding: str, case: str
) -> None:
    meta, limit = REFUSED[case]
    ctx = str(uuid.uuid4())
    text = await _refusal(options_server, http, binding, meta, ctx)
    assert limit in text, text
    field = next(iter(meta))
    assert f"metadata.{field}" in text, text
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"contextId": ctx}}
    listed = (await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})).json()
    assert listed["result"]["tasks"] == [], "a refused message starts no task"


async def test_a_role_with_no_list_refuses_any_model_and_says_so(http: httpx.AsyncClient) -> None:
    message = text_message("hello", metadata={"model": "big-model"})
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    resp = (await http.post("/agents/reviewer/a2a/jsonrpc", json=body)).json()
    assert resp["error"]["code"] == -32602
    assert "the role 'reviewer' offers no choice of model" in resp["error"]["message"]


def _session_model(task: dict[str, Any]) -> str:
    return task["metadata"]["session"]["model"]


async def test_a_task_runs_on_its_model_and_keeps_it_for_every_turn(http: httpx.AsyncClient) -> None:
    chosen = {"model": "small-model", "timeoutS": 30}
    task = await result(http, "message/send", {"message": text_message("ask:Go on?", metadata=chosen)})
    task = await wait_until_stopped(http, task)
    assert task["status"]["state"] == "input-required"
    assert task["metadata"]["model"] == "small-model" and task["metadata"]["timeoutS"] == 30
    assert _session_model(task) == "small-model", "the run was given the task's model"
    ids = {"taskId": task["id"], "contextId": task["contextId"]}
    for other, named in (({"model": "big-model"}, "'small-model'"), ({"timeoutS": 20}, "30")):
        refused = await call(http, "message/send", {"message": text_message("y", **ids, metadata=other)})
        assert refused["error"]["code"] == -32602, refused
        assert f"this task's is {named}" in refused["error"]["message"]
    answer = text_message("y", **ids, metadata={"model": "small-model"})
    done = await wait_until_stopped(http, await result(http, "message/send", {"message": answer}))
    assert done["status"]["state"] == "completed"
    assert done["metadata"]["model"] == "small-model" and _session_model(done) == "small-model"


async def test_a_task_that_names_no_model_runs_on_the_roles_own(http: httpx.AsyncClient) -> None:
    task = await wait_until_stopped(
        http, await result(http, "message/send", {"message": text_message("say:hi")})
    )
    assert task["status"]["state"] == "completed"
    assert "model" not in task["metadata"] and _session_model(task) == "scripted"
    again = text_message(
        "say:again", taskId=task["id"], contextId=task["contextId"], metadata={"model": "small-model"}
    )
    refused = await call(http, "message/send", {"message": again})
    assert "this task's is the role's own" in refused["error"]["message"]


async def test_a_lower_timeout_ends_the_run_as_the_roles_timeout_would(http: httpx.AsyncClient) -> None:
    message = text_message("say:started;sleep:600", metadata={"timeoutS": 2})
    task = await result(http, "message/send", {"message": message, "configuration": {"blocking": False}})
    task = await wait_until_stopped(http, task, within_s=60)
    assert task["status"]["state"] == "failed"
    assert "did not finish within 2 s and was stopped" in status_text(task)


async def test_a_run_started_again_after_a_restart_keeps_the_tasks_model(
    options_server: ServerProcess,
) -> None:
    """Last in the file: it restarts the module's server. The answer to a task that waited through a restart
    starts a new run, which reads the task's model from the task: its session report (the last one is
    kept) names it, where a run given none would name `scripted`."""
    async with httpx.AsyncClient(base_url=options_server.base_url, timeout=30) as http:
        task = await result(
            http, "message/send", {"message": text_message("ask:Go on?", metadata={"model": "small-model"})}
        )
        assert task["status"]["state"] == "input-required"
        options_server.kill()
        options_server.start()
        answer = text_message("y", taskId=task["id"], contextId=task["contextId"])
        done = await wait_until_stopped(http, await result(http, "message/send", {"message": answer}))
    assert done["status"]["state"] == "completed"
    assert _session_model(done) == "small-model"
