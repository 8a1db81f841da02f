"""The v0.3 operations: decode with the v0.3 codec, call the task service, encode v0.3 results."""

from __future__ import annotations

from typing import Any

import orjson

from app.protocol import json_v03, pushconfig
from app.protocol.errors import ExtendedAgentCardNotConfiguredError
from app.protocol.model import Message
from app.tasks.service import Snapshot

from .admission import admit
from .calls import Call, Handler, Item, Stream, StreamHandler, last_event_id

INLINE = "configuration.pushNotificationConfig"


def _task_encoder(history_length: int | None = None):
    def encode(item: Item) -> Any:
        if isinstance(item, Snapshot):
            return json_v03.encode_task(item.task, history_length)
        if isinstance(item, Message):
            return json_v03.encode_message(item)
        return json_v03.encode_event(item.event)

    return encode


async def send(params: Any, call: Call) -> Any:
    message, config, push = json_v03.decode_send(params)
    webhook = pushconfig.decode(push, "0.3", INLINE) if push is not None else None
    result = await call.c.service.send(
        call.owner, await admit(message, call), config, webhook, call.idempotency_key
    )
    if isinstance(result, Message):
        return json_v03.encode_message(result)
    return json_v03.encode_task(result, config.history_length)


async def stream(params: Any, call: Call) -> Stream:
    message, config, push = json_v03.decode_send(params)
    webhook = pushconfig.decode(push, "0.3", INLINE) if push is not None else None
    items = await call.c.service.stream(
        call.owner, await admit(message, call), webhook, config, call.idempotency_key
    )
    return items, _task_encoder(config.history_length)


async def get(params: Any, call: Call) -> Any:
    task_id, history_length = json_v03.decode_task_query(params)
    return json_v03.encode_task(await call.c.service.get(call.owner, task_id, history_length), history_length)


async def cancel(params: Any, call: Call) -> Any:
    task_id, _ = json_v03.decode_task_id(params)
    return json_v03.encode_task(await call.c.service.cancel(call.owner, task_id))


async def resubscribe(params: Any, call: Call) -> Stream:
    task_id, _ = json_v03.decode_task_id(params)
    after = last_event_id(call.request, params)
    items = await call.c.service.resubscribe(call.owner, task_id, after)
    return items, _task_encoder()


async def set_push(params: Any, call: Call) -> Any:
    """`tasks/pushNotificationConfig/set`: the stored config (server id if none given), redacted."""
    cfg = pushconfig.decode_v03_set(params)
    stored = await call.c.service.set_push_config(call.owner, cfg.task_id, cfg)
    return pushconfig.encode_v03(stored)


async def get_push(params: Any, call: Call) -> Any:
    """`tasks/pushNotificationConfig/get`; without a config id (deprecated form), the task's first."""
    task_id, config_id = pushconfig.decode_v03_ref(params)
    return pushconfig.encode_v03(await call.c.service.get_push_config(call.owner, task_id, config_id))


async def list_push(params: Any, call: Call) -> Any:
    task_id, _ = pushconfig.decode_v03_ref(params)
    configs, _ = await call.c.service.list_push_configs(call.owner, task_id)
    return [pushconfig.encode_v03(c) for c in configs]


async def delete_push(params: Any, call: Call) -> Any:
    task_id, config_id = pushconfig.decode_v03_ref(params, need_config=True)
    assert config_id is not None
    await call.c.service.delete_push_config(call.owner, task_id, config_id)
    return None


async def extended_card(params: Any, call: Call) -> Any:
    """The authenticated extended card, hybrid (a v0.3 client reads its v0.3 fields); the guard has
    already authenticated the caller."""
    if call.c.extended_card is None:
        raise ExtendedAgentCardNotConfiguredError()
    return orjson.loads(call.c.extended_card.hybrid.body)


METHODS: dict[str, Handler] = {
    "message/send": send,
    "tasks/get": get,
    "tasks/cancel": cancel,
    "tasks/pushNotificationConfig/set": set_push,
    "tasks/pushNotificationConfig/get": get_push,
    "tasks/pushNotificationConfig/list": list_push,
    "tasks/pushNotificationConfig/delete": delete_push,
    "agent/getAuthenticatedExtendedCard": extended_card,
    # Pre-0.3 names from the seed documents, answered in v0.3 shapes.
    "tasks/send": send,
    "tasks/pushNotification/set": set_push,
    "tasks/pushNotification/get": get_push,
}
STREAMING: dict[str, StreamHandler] = {
    "message/stream": stream,
    "tasks/resubscribe": resubscribe,
    "tasks/sendSubscribe": stream,
}
