"""Every v0.3 method with its shapes, and the task lifecycle rules behind them."""

from __future__ import annotations

import asyncio
import uuid

from tests.support.rpc import call, result, send, text_message


async def wait_state(client, task_id: str, states: set[str], timeout: float = 60) -> dict:
    """Poll tasks/get until the task reaches one of `states`."""
    async with asyncio.timeout(timeout):
        while True:
            task = await result(client, "tasks/get", {"id": task_id})
            if task["status"]["state"] in states:
                return task
            await asyncio.sleep(0.02)


def response_text(task: dict) -> str:
    art = next(a for a in task["artifacts"] if a.get("name") == "assistant-response")
    return "".join(p["text"] for p in art["parts"])


async def test_send_blocks_until_completed_with_v03_shapes(client):
    task = await send(client, "say:hello")
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert task["status"]["timestamp"].endswith("Z")
    assert task["contextId"] and task["id"]
    user = task["history"][0]
    assert user["kind"] == "message" and user["role"] == "user"
    assert user["taskId"] == task["id"] and user["contextId"] == task["contextId"]
    assert user["parts"] == [{"kind": "text", "text": "say:hello"}]
    assert response_text(task) == "hello"
    states = [t["state"] for t in task["metadata"]["stateTransitions"]]
    assert states == ["submitted", "working", "completed"]
    assert all(t["timestamp"].endswith("Z") for t in task["metadata"]["stateTransitions"])


async def test_history_length(client):
    task = await send(client, "tool:Read", historyLength=0)
    assert task["history"] == []
    task = await send(client, "tool:Read", historyLength=1)
    assert len(task["history"]) == 1 and task["history"][0]["role"] == "agent"
    full = await result(client, "tasks/get", {"id": task["id"]})
    assert len(full["history"]) == 3
    two = await result(client, "tasks/get", {"id": task["id"], "historyLength": 2})
    assert two["history"] == full["history"][-2:]


async def test_non_blocking_send_returns_at_once(client):
    # A run far longer than any wait here: the send can only have returned without waiting for it.
    before = await running_agents(client)
    task = await send(client, "sleep:300;say:late", blocking=False)
    assert task["status"]["state"] in {"submitted", "working"}
    await wait_state(client, task["id"], {"working"})
    await result(client, "tasks/cancel", {"id": task["id"]})
    async with asyncio.timeout(60):  # its run gone before the next test counts runs
        while await running_agents(client) > before:
            await asyncio.sleep(0.02)


async def test_blocking_send_returns_at_input_required_and_answer_resumes(client):
    task = await send(client, "ask:Proceed?")
    assert task["status"]["state"] == "input-required"
    assert task["status"]["message"]["parts"][0]["text"] == "Proceed?"
    answer = text_message("yes please", taskId=task["id"])
    done = await result(client, "message/send", {"message": answer})
    assert done["id"] == task["id"]
    assert done["contextId"] == task["contextId"], "contextId is inferred from taskId"
    assert done["status"]["state"] == "completed"
    assert response_text(done) == "answer:yes please"
    roles = [m["role"] for m in done["history"]]
    assert roles == ["user", "agent", "user"]
    states = [t["state"] for t in done["metadata"]["stateTransitions"]]
    assert states == ["submitted", "working", "input-required", "working", "completed"]


async def test_mismatching_context_is_rejected_and_changes_nothing(client):
    task = await send(client, "ask:Sure?")
    bad = text_message("yes", taskId=task["id"], contextId="another-context")
    body = await call(client, "message/send", {"message": bad})
    assert body["error"]["code"] == -32602
    assert "contextId" in body["error"]["message"]
    still = await result(client, "tasks/get", {"id": task["id"]})
    assert still["status"]["state"] == "input-required"
    assert len(still["history"]) == len(task["history"])


async def test_message_to_terminal_task_is_rejected(client):
    task = await send(client, "say:x")
    body = await call(client, "message/send", {"message": text_message("more", taskId=task["id"])})
    assert body["error"]["code"] == -32004
    assert "completed" in body["error"]["message"]
    after = await result(client, "tasks/get", {"id": task["id"]})
    assert after == task


async def test_message_to_unknown_task_is_not_found(client):
    body = await call(client, "message/send", {"message": text_message("x", taskId=str(uuid.uuid4()))})
    assert body["error"]["code"] == -32001


async def test_follow_up_in_same_context_starts_a_new_task(client):
    first = await send(client, "say:one")
    msg = text_message("say:two", contextId=first["contextId"])
    second = await result(client, "message/send", {"message": msg})
    assert second["id"] != first["id"]
    assert second["contextId"] == first["contextId"]


async def test_message_id_of_a_finished_task_is_a_new_message(client):
    msg = text_message("chunks:3")
    first = await result(client, "message/send", {"message": msg})
    again = await result(client, "message/send", {"message": msg})
    assert again["id"] != first["id"], "the first task had ended: the same messageId is a new message"
    assert again["status"]["state"] == "completed"
    assert response_text(again) == response_text(first), "the agent ran it again"


async def test_get_unknown_task(client):
    body = await call(client, "tasks/get", {"id": "no-such-task"})
    assert body["error"]["code"] == -32001
    assert body["error"]["data"] == {"taskId": "no-such-task"}


async def running_agents(client) -> int:
    return (await client.get("/healthz")).json()["runningAgents"]


async def test_cancel_running_task_stops_the_agent(client):
    before = await running_agents(client)
    task = await send(client, "sleep:300;say:should-not-appear", blocking=False)
    await wait_state(client, task["id"], {"working"})
    assert await running_agents(client) == before + 1
    canceled = await result(client, "tasks/cancel", {"id": task["id"]})
    assert canceled["kind"] == "task"
    assert canceled["status"]["state"] == "canceled"
    # The agent's run ends long before its 300 s sleep would have: the cancel reached it.
    async with asyncio.timeout(60):
        while await running_agents(client) > before:
            await asyncio.sleep(0.02)
    after = await result(client, "tasks/get", {"id": task["id"]})
    assert after["status"]["state"] == "canceled"
    assert all(a.get("name") != "assistant-response" for a in after["artifacts"])


async def test_cancel_waiting_task(client):
    task = await send(client, "ask:Wait?")
    canceled = await result(client, "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    body = await call(client, "message/send", {"message": text_message("late", taskId=task["id"])})
    assert body["error"]["code"] == -32004


async def test_cancel_terminal_task_is_not_cancelable_and_unchanged(client):
    task = await send(client, "say:x")
    body = await call(client, "tasks/cancel", {"id": task["id"]})
    assert body["error"]["code"] == -32002
    assert await result(client, "tasks/get", {"id": task["id"]}) == task


async def test_cancel_unknown_task(client):
    body = await call(client, "tasks/cancel", {"id": "nope"})
    assert body["error"]["code"] == -32001


async def test_failed_agent(client):
    task = await send(client, "fail:compiler exploded")
    assert task["status"]["state"] == "failed"
    assert task["status"]["message"]["parts"][0]["text"] == "compiler exploded"


async def test_crashing_agent_fails_the_task_with_a_reason(client):
    task = await send(client, "crash")
    assert task["status"]["state"] == "failed"
    assert "scripted crash" in task["status"]["message"]["parts"][0]["text"]


async def test_agent_that_stops_without_result_fails_the_task(client):
    task = await send(client, "say:half;stop")
    assert task["status"]["state"] == "failed"
    assert "without reporting a result" in task["status"]["message"]["parts"][0]["text"]


async def test_push_config_methods_check_the_task_and_the_url(client):
    for method in (
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
    ):
        body = await call(client, method, {"id": "t"})
        assert body["error"]["code"] == -32001, method
    body = await call(
        client, "tasks/pushNotificationConfig/delete", {"id": "t", "pushNotificationConfigId": "c"}
    )
    assert body["error"]["code"] == -32001
    body = await call(client, "tasks/pushNotificationConfig/set", {"id": "t"})
    assert body["error"]["code"] == -32602
    inline = {
        "message": text_message("say:x"),
        "configuration": {"pushNotificationConfig": {"url": "http://example.com/hook"}},
    }
    body = await call(client, "message/send", inline)
    assert body["error"]["code"] == -32602 and "https" in body["error"]["message"]


async def test_extended_card_not_configured(client):
    body = await call(client, "agent/getAuthenticatedExtendedCard")
    assert body["error"]["code"] == -32007


async def test_rest_alias_for_get(client):
    task = await send(client, "tool:Grep")
    resp = await client.get(f"/a2a/tasks/{task['id']}")
    assert resp.status_code == 200
    assert resp.json() == task
    resp = await client.get(f"/a2a/tasks/{task['id']}", params={"historyLength": 1})
    assert len(resp.json()["history"]) == 1
    resp = await client.get("/a2a/tasks/missing")
    assert resp.status_code == 404
    assert resp.json() == {"code": -32001, "type": "TaskNotFoundError", "message": "Task missing not found"}
    resp = await client.get(f"/a2a/tasks/{task['id']}", params={"historyLength": "-1"})
    assert resp.status_code == 400
