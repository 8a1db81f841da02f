"""Interop: the official JavaScript A2A client (`@a2a-js/sdk` with its `client/grpc` transport) drives the
real server over gRPC, in both protocol versions.

The server runs with a free `GRPC_PORT`, so its card lists a `GRPC` interface (`host:port`) per version.
`tests/support/js/interop.mjs --transport GRPC --protocol <v>` resolves that card with the SDK's resolver,
lets the SDK's `ClientFactory` build a gRPC client from it, runs every step and prints one JSON object per
step; each step's `wire` lists the gRPC calls it made (method path and `a2a-version` metadata, recorded by
a grpc-js interceptor), so each test also checks which RPCs, of which service, carried the step. The npm
packages (`@grpc/grpc-js` and `@bufbuild/protobuf` beside the SDK) are installed as in test_interop_js.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import BACKENDS, make_server
from tests.interop.test_interop_js import (
    CANCELED,
    COMPLETED,
    RESPONSE,
    SUBMITTED,
    WORKING,
    Run,
    Variant,
    node,  # noqa: F401 - the fixture: node with tests/support/js's packages installed
    run_interop,
)
from tests.support.server import ServerProcess, free_port

INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
STEPS = (
    "send",
    "stream",
    "get",
    "cancel",
    "cancel_nonblocking",
    "not_found",
    "resubscribe",
    "push_config",
    "multi_turn",
)

# The gRPC service each protocol version is served as, and its RPC names by operation.
SERVICES = {"1.0": "lf.a2a.v1.A2AService", "0.3": "a2a.v1.A2AService"}
GRPC_OPS = {
    "1.0": {
        "SendMessage": "send",
        "SendStreamingMessage": "stream",
        "GetTask": "get",
        "CancelTask": "cancel",
        "SubscribeToTask": "subscribe",
        "CreateTaskPushNotificationConfig": "create_config",
        "GetTaskPushNotificationConfig": "get_config",
        "ListTaskPushNotificationConfigs": "list_configs",
        "DeleteTaskPushNotificationConfig": "delete_config",
    },
    "0.3": {
        "SendMessage": "send",
        "SendStreamingMessage": "stream",
        "GetTask": "get",
        "CancelTask": "cancel",
        "TaskSubscription": "subscribe",
        "CreateTaskPushNotificationConfig": "create_config",
        "GetTaskPushNotificationConfig": "get_config",
        "ListTaskPushNotificationConfig": "list_configs",
        "DeleteTaskPushNotificationConfig": "delete_config",
    },
}

STEP_ARGS = ("--transport", "GRPC", "--steps", ",".join(STEPS))
VARIANTS = [
    pytest.param(Variant((*STEP_ARGS, "--protocol", "1.0"), "GRPC", "1.0"), id="v10-grpc"),
    pytest.param(Variant((*STEP_ARGS, "--protocol", "0.3"), "GRPC", "0.3"), id="v03-grpc"),
]

# @a2a-js/sdk 1.3.0's v0.3 FromProto (shared by its v0.3 REST and gRPC transports) drops `append` from
# artifact-update events: a streamed artifact cannot be folded back, whatever the server sends (it sends
# `append: true` on every chunk after the first). On v0.3 the script's fold check fails for that alone.
JS_V03_APPEND_BUG = "@a2a-js/sdk 1.3.0 v0.3 FromProto drops artifact-update `append`"
V03_FOLD_STEPS = ["stream", "resubscribe"]


@pytest.fixture(scope="module", params=BACKENDS)
async def grpc_server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    """A server of the backend with the gRPC binding on a free port."""
    srv = await make_server(
        request.param, tmp_path_factory.mktemp(f"grpc-{request.param}"), GRPC_PORT=str(free_port())
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module", params=VARIANTS)
async def run(request: pytest.FixtureRequest, grpc_server: ServerProcess, node: str) -> AsyncIterator[Run]:  # noqa: F811
    """One run of every step against the server over gRPC in the variant's protocol version."""
    yield await run_interop(node, grpc_server.base_url, request.param)


def ops(run: Run, step: dict[str, Any]) -> list[str]:
    """The RPCs the step made, each checked to be a gRPC call of the negotiated version's service."""
    version = run.client["protocolVersion"]
    found = []
    for call in step["wire"]:
        assert call["method"] == "GRPC", f"not a gRPC call: {call}"
        assert call["version"] == version, f"a2a-version metadata {call['version']!r} != {version!r}: {call}"
        service, _, method = call["path"].lstrip("/").partition("/")
        assert service == SERVICES[version], call
        found.append(GRPC_OPS[version].get(method, f"unexpected {call['path']}"))
    return found


def folding_step(run: Run, name: str) -> dict[str, Any]:
    """The step, which must say ok; on v0.3 also one whose only failure is the fold (the SDK bug), so
    the test still checks everything else before `check_folded`."""
    step = run.steps.get(name)
    if run.variant.version == "0.3" and step and step.get("error", "").startswith(f"folded {RESPONSE}:"):
        return step
    return run.step(name)


def check_folded(run: Run, step: dict[str, Any], want: str) -> None:
    """The streamed response folds back to `want`; on v0.3 an expected failure until the SDK is fixed."""
    got = step["folded"]["artifacts"].get(RESPONSE)
    if run.variant.version == "0.3":
        assert got != want, f"the v0.3 SDK folds {RESPONSE} now: drop the {JS_V03_APPEND_BUG!r} expectation"
        pytest.xfail(JS_V03_APPEND_BUG)
    assert got == want


# ---- tests --------------------------------------------------------------------------------------


def test_client_is_built_from_the_cards_grpc_interface(run: Run, grpc_server: ServerProcess) -> None:
    client = run.client
    assert (client["transport"], client["protocolVersion"]) == ("GRPC", run.variant.version)
    advertised = [
        i["url"]
        for i in client["card"]["interfaces"]
        if i["protocolBinding"] == "GRPC" and i["protocolVersion"] == run.variant.version
    ]
    # Fetched through 127.0.0.1 with no PUBLIC_URL: the gRPC host follows the card's origin (`Card.at`).
    assert advertised == [f"127.0.0.1:{grpc_server.env['GRPC_PORT']}"], client["card"]["interfaces"]
    # grpc-js names the channel's target with its resolver scheme.
    assert (client["endpoint"] or "").removeprefix("dns:") in advertised, client["endpoint"]
    assert [(c["method"], c["path"]) for c in client["wire"]] == [("GET", "/.well-known/agent-card.json")]


def test_send_blocking_completes_with_echoed_text(run: Run) -> None:
    step = run.step("send")
    task = step["task"]
    assert task["id"] and task["contextId"]
    assert task["state"] == COMPLETED
    assert [a["text"] for a in task["artifacts"] if a["name"] == RESPONSE] == [
        "hello from the official js sdk"
    ]
    assert [m["text"] for m in task["history"] if m["role"] == "ROLE_USER"] == [
        "hello from the official js sdk"
    ]
    assert ops(run, step) == ["send"]


def _states_in_order(events: list[dict[str, Any]], order: list[str]) -> list[str]:
    states = [e["state"] for e in events if e["kind"] in ("task", "status")]
    assert all(s in order for s in states), states
    assert [order.index(s) for s in states] == sorted(order.index(s) for s in states), states
    return states


def test_stream_delivers_task_then_updates_until_completed(run: Run) -> None:
    step = folding_step(run, "stream")
    events = step["events"]
    assert events[0]["kind"] == "task", "the stream opens with the task"
    assert all(e["kind"] in ("status", "artifact") for e in events[1:]), events
    assert all(e["taskId"] == events[0]["id"] for e in events[1:]), "every update names the streamed task"
    states = _states_in_order(events, [SUBMITTED, WORKING, COMPLETED])
    assert states.count(COMPLETED) == 1
    assert (events[-1]["kind"], events[-1]["state"]) == ("status", COMPLETED), "completed is the last event"
    assert step["folded"]["state"] == COMPLETED
    assert ops(run, step) == ["stream"]
    check_folded(run, step, "chunk-0 chunk-1 chunk-2 chunk-3 chunk-4 ")


def test_get_task_by_id_with_history(run: Run) -> None:
    step = run.step("get")
    task = step["task"]
    assert task["state"] == COMPLETED
    assert [a["text"] for a in task["artifacts"] if a["name"] == RESPONSE] == ["hello"]
    assert [(m["role"], m["text"], m["taskId"]) for m in task["history"]] == [
        ("ROLE_USER", "say:hello", task["id"])
    ]
    # v1.0's history_length has presence (0: no history); v0.3's is a plain int32 whose 0 means unlimited.
    assert step["historyLength0"] == (1 if run.variant.version == "0.3" else 0)
    assert ops(run, step) == ["send", "get", "get"]


def test_cancel_a_streaming_task(run: Run) -> None:
    step = run.step("cancel")
    assert (step["canceled"]["id"], step["canceled"]["state"]) == (step["taskId"], CANCELED)
    events = step["events"]
    assert events[0]["kind"] == "task" and events[0]["id"] == step["taskId"]
    assert WORKING in [e["state"] for e in events if e["kind"] in ("task", "status")]
    assert (events[-1]["kind"], events[-1]["state"]) == ("status", CANCELED), "the stream ends canceled"
    assert step["cancelAgain"]["name"] == "TaskNotCancelableError"
    assert ops(run, step) == ["stream", "cancel", "get", "cancel"]


def test_cancel_a_task_started_non_blocking(run: Run) -> None:
    step = run.step("cancel_nonblocking")
    assert step["started"] in (SUBMITTED, WORKING)
    assert step["state"] == CANCELED
    assert ops(run, step) == ["send", "cancel", "get"]


def test_unknown_task_is_task_not_found(run: Run) -> None:
    step = run.step("not_found")
    assert step["get"]["name"] == "TaskNotFoundError"
    assert step["cancel"]["name"] == "TaskNotFoundError"
    assert step["subscribe"]["name"] == "TaskNotFoundError", step["subscribe"]
    assert ops(run, step) == ["get", "cancel", "subscribe"]


def test_resubscribe_to_a_paused_task_follows_it_to_the_end(run: Run) -> None:
    step = folding_step(run, "resubscribe")
    events = step["events"]
    assert (events[0]["kind"], events[0]["id"], events[0]["state"]) == (
        "task",
        step["taskId"],
        INPUT_REQUIRED,
    )
    assert all(e["taskId"] == step["taskId"] for e in events[1:]), events
    states = _states_in_order(events, [INPUT_REQUIRED, WORKING, COMPLETED])
    assert WORKING in states and states.count(COMPLETED) == 1
    assert (events[-1]["kind"], events[-1]["state"]) == ("status", COMPLETED), "completed is the last event"
    assert ops(run, step) == ["send", "subscribe", "send"]
    check_folded(run, step, "answer:yeschunk-0 chunk-1 chunk-2 ")


def test_push_configs_round_trip(run: Run) -> None:
    step = run.step("push_config")
    assert step["created"]["id"] == step["got"]["id"] == "cfg-1"
    assert step["created"]["url"] == step["got"]["url"] == "https://93.184.215.14/hook"
    assert step["created"]["tokenKept"] is False, "the token is not echoed back"
    assert step["listed"] == ["cfg-1"]
    assert step["listedAfterDelete"] == []
    assert step["getAfterDelete"]["name"] == "TaskNotFoundError"
    assert ops(run, step) == [
        "send",
        "create_config",
        "get_config",
        "list_configs",
        "delete_config",
        "list_configs",
        "get_config",
    ]


def test_multi_turn_input_required_then_completed(run: Run) -> None:
    step = run.step("multi_turn")
    waiting, done = step["waiting"], step["done"]
    assert waiting["state"] == INPUT_REQUIRED
    assert "Proceed?" in waiting["statusText"]
    assert (done["id"], done["contextId"], done["state"]) == (waiting["id"], waiting["contextId"], COMPLETED)
    assert [a["text"] for a in done["artifacts"] if a["name"] == RESPONSE] == ["answer:yes"]
    assert [m["text"] for m in done["history"] if m["role"] == "ROLE_USER"] == ["ask:Proceed?", "yes"]
    assert ops(run, step) == ["send", "send"]


def test_every_step_ran_and_the_script_exits_zero(run: Run) -> None:
    assert list(run.steps) == ["client", *STEPS], run.describe()
    js_bug = run.variant.version == "0.3"
    failed = [name for name, s in run.steps.items() if not s["ok"]]
    assert failed == (V03_FOLD_STEPS if js_bug else []), run.describe()
    assert run.returncode == (1 if js_bug else 0), run.describe()
