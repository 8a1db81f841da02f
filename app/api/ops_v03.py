"""The v0.3 operations: decode with the v0.3 codec, call the task service, encode v0.3 results."""

from __future__ import annotations

from typing import Any

from app.protocol import v03
from app.protocol.errors import ExtendedAgentCardNotConfiguredError, PushNotificationNotSupportedError
from app.protocol.model import Message
from app.tasks.service import Snapshot

from .calls import Call, Handler, Item, Stream, StreamHandler, accept_message, last_event_id

PUSH_OFF = "This agent does not support push notifications (capabilities.pushNotifications is false)"


def _task_encoder(history_length: int | None = None):
    def encode(item: Item) -> Any:
        if isinstance(item, Snapshot):
            return v03.encode_task(item.task, history_length)
        if isinstance(item, Message):
            return v03.encode_message(item)
        return v03.encode_event(item.event)

    return encode


async def send(params: Any, call: Call) -> Any:
    message, config, push = v03.decode_send(params)
    if push is not None:
        raise PushNotificationNotSupportedError(PUSH_OFF)
    result = await call.c.service.send(call.owner, accept_message(message, call), config)
    if isinstance(result, Message):
        return v03.encode_message(result)
    return v03.encode_task(result, config.history_length)


async def stream(params: Any, call: Call) -> Stream:
    message, config, push = v03.decode_send(params)
    if push is not None:
        raise PushNotificationNotSupportedError(PUSH_OFF)
    items = await call.c.service.stream(call.owner, accept_message(message, call))
    return items, _task_encoder(config.history_length)


async def get(params: Any, call: Call) -> Any:
    task_id, history_length = v03.decode_task_query(params)
    return v03.encode_task(await call.c.service.get(call.owner, task_id), history_length)


async def cancel(params: Any, call: Call) -> Any:
    task_id, _ = v03.decode_task_id(params)
    return v03.encode_task(await call.c.service.cancel(call.owner, task_id))


async def resubscribe(params: Any, call: Call) -> Stream:
    task_id, _ = v03.decode_task_id(params)
    after = last_event_id(call.request, params)
    items = await call.c.service.resubscribe(call.owner, task_id, after)
    return items, _task_encoder()


async def push_config(params: Any, call: Call) -> Any:
    raise PushNotificationNotSupportedError(PUSH_OFF)


async def extended_card(params: Any, call: Call) -> Any:
    raise ExtendedAgentCardNotConfiguredError()


METHODS: dict[str, Handler] = {
    "message/send": send,
    "tasks/get": get,
    "tasks/cancel": cancel,
    "tasks/pushNotificationConfig/set": push_config,
    "tasks/pushNotificationConfig/get": push_config,
    "tasks/pushNotificationConfig/list": push_config,
    "tasks/pushNotificationConfig/delete": push_config,
    "agent/getAuthenticatedExtendedCard": extended_card,
    # Pre-0.3 names from the seed documents, answered in v0.3 shapes.
    "tasks/send": send,
    "tasks/pushNotification/set": push_config,
    "tasks/pushNotification/get": push_config,
}
STREAMING: dict[str, StreamHandler] = {
    "message/stream": stream,
    "tasks/resubscribe": resubscribe,
    "tasks/sendSubscribe": stream,
}
