"""The v1.0 operations: ProtoJSON requests in, `SendMessageResponse` / Task / StreamResponse out.

The same handlers serve the JSON-RPC binding (PascalCase methods) and the HTTP+JSON binding (REST routes
build the request message from path, query and body, and call these).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.protocol import protojson_v10, pushconfig
from app.protocol.errors import UnsupportedOperationError
from app.tasks.service import TaskPage

from ..card.build import Card
from .admission import admit
from .calls import Call, Handler, Replies, Stream, StreamHandler, last_event_id
from .routing import by_task, for_send

INLINE = "configuration.taskPushNotificationConfig"


REPLIES = Replies(
    protojson_v10.encode_task, protojson_v10.encode_message, protojson_v10.encode_event, oneof=True
)


async def send(params: Any, call: Call) -> Any:
    message, config, push = protojson_v10.decode_send(params)
    webhook = pushconfig.decode(push, "1.0", INLINE) if push is not None else None
    call = await for_send(params, message, call, config.task_id)
    result = await call.c.service.send(
        call.owner, await admit(message, call), config, webhook, call.idempotency_key
    )
    return REPLIES.result(result, config.history_length)


async def stream(params: Any, call: Call) -> Stream:
    message, config, push = protojson_v10.decode_send(params)
    webhook = pushconfig.decode(push, "1.0", INLINE) if push is not None else None
    call = await for_send(params, message, call, config.task_id)
    items = await call.c.service.stream(
        call.owner, await admit(message, call), webhook, config, call.idempotency_key
    )
    return items, REPLIES.stream(config.history_length)


async def get(params: Any, call: Call) -> Any:
    task_id, history_length = protojson_v10.decode_get(params)
    call = await by_task(call, task_id)
    return protojson_v10.encode_task(
        await call.c.service.get(call.owner, task_id, history_length), history_length
    )


async def list_page(params: Any, call: Call) -> tuple[protojson_v10.ListQuery, TaskPage]:
    """The query a ListTasks request asks and the page it gets (the `/a2a/tasks` alias prints it in v0.3)."""
    q = protojson_v10.decode_list(params)
    page = await call.c.service.list(
        call.owner,
        context_id=q.context_id,
        state=q.status,
        after=q.status_timestamp_after,
        page_size=q.page_size,
        page_token=q.page_token,
        include_artifacts=q.include_artifacts,
        history_length=q.history_length,
    )
    return q, page


async def list_tasks(params: Any, call: Call) -> Any:
    q, page = await list_page(params, call)
    return {
        "tasks": [protojson_v10.encode_task(t, q.history_length, q.include_artifacts) for t in page.tasks],
        "nextPageToken": page.next_token,
        "pageSize": q.page_size,
        "totalSize": page.total,
    }


async def cancel(params: Any, call: Call) -> Any:
    task_id = protojson_v10.decode_id(params)
    call = await by_task(call, task_id)
    return protojson_v10.encode_task(await call.c.service.cancel(call.owner, task_id))


async def subscribe(params: Any, call: Call) -> Stream:
    """The current Task first, then its events; a finished task cannot be subscribed to (-32004)."""
    task_id = protojson_v10.decode_id(params)
    call = await by_task(call, task_id)
    after = last_event_id(call, params)
    state = (await call.c.service.head(call.owner, task_id)).state
    if state.terminal:
        raise UnsupportedOperationError(
            f"Task {task_id} is {protojson_v10.STATE_NAMES[state]}; there is nothing left to subscribe to",
            {"taskId": task_id},
        )
    items = await call.c.service.resubscribe(call.owner, task_id, after)
    return items, REPLIES.stream()


async def create_push(params: Any, call: Call) -> Any:
    """`CreateTaskPushNotificationConfig`: the stored config with its (assigned) id, redacted."""
    cfg = pushconfig.decode_v10_create(params)
    call = await by_task(call, cfg.task_id)
    stored = await call.c.service.set_push_config(call.owner, cfg.task_id, cfg)
    return pushconfig.encode_v10(stored)


async def get_push(params: Any, call: Call) -> Any:
    task_id, config_id, _, _ = pushconfig.decode_v10_ref(params, need_config=True)
    call = await by_task(call, task_id)
    return pushconfig.encode_v10(await call.c.service.get_push_config(call.owner, task_id, config_id))


async def list_push(params: Any, call: Call) -> Any:
    task_id, _, page_size, page_token = pushconfig.decode_v10_ref(params)
    call = await by_task(call, task_id)
    configs, token = await call.c.service.list_push_configs(call.owner, task_id, page_size, page_token)
    return {"configs": [pushconfig.encode_v10(c) for c in configs], "nextPageToken": token}


async def delete_push(params: Any, call: Call) -> Any:
    """`DeleteTaskPushNotificationConfig`: idempotent; JSON-RPC `null` (REST answers `{}`)."""
    task_id, config_id, _, _ = pushconfig.decode_v10_ref(params, need_config=True)
    call = await by_task(call, task_id)
    assert config_id is not None
    await call.c.service.delete_push_config(call.owner, task_id, config_id)
    return None


def extended(call: Call) -> Card:
    """The authenticated extended card; the guard has already authenticated the caller."""
    if call.c.extended_card is None:
        raise UnsupportedOperationError(
            "This agent declares no extended agent card (capabilities.extendedAgentCard)"
        )
    return call.c.extended_card.at(call.headers.get("host"))


async def extended_card(params: Any, call: Call) -> Any:
    """`GetExtendedAgentCard`: the 1.0 variant (JSON-RPC asks for it with `A2A-Version: 1.x`; gRPC by the
    service)."""
    return orjson.loads(extended(call).v10.body)


METHODS: dict[str, Handler] = {
    "SendMessage": send,
    "GetTask": get,
    "ListTasks": list_tasks,
    "CancelTask": cancel,
    "CreateTaskPushNotificationConfig": create_push,
    "GetTaskPushNotificationConfig": get_push,
    "ListTaskPushNotificationConfigs": list_push,
    "DeleteTaskPushNotificationConfig": delete_push,
    "GetExtendedAgentCard": extended_card,
}
STREAMING: dict[str, StreamHandler] = {
    "SendStreamingMessage": stream,
    "SubscribeToTask": subscribe,
}
