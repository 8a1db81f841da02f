"""The v0.3 operations, for both v0.3 bindings: decode the params, call the task service, encode the result.

A binding extracts the params (JSON-RPC: the request's `params`; HTTP+JSON: path, query and body, built
into the same request objects) and calls a handler here with its `Wire`: the JSON-RPC shapes (`JSONRPC`,
the default) or the ProtoJSON of the v0.3 proto (`REST`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from app.protocol import json_v03, protojson_v03, pushconfig
from app.protocol.errors import ExtendedAgentCardNotConfiguredError
from app.protocol.model import Message, PushConfig, SendConfig

from .admission import admit
from .calls import Call, Replies, Stream, last_event_id
from .routing import by_task, for_send


@dataclass(frozen=True, slots=True)
class Wire:
    """What differs between the two v0.3 bindings: the payload forms, never the work."""

    decode_send: Callable[[Any], tuple[Message, SendConfig, dict[str, Any] | None]]
    inline_push: str
    """Where a send's push config sits, for its error messages."""
    replies: Replies
    decode_push_set: Callable[[Any], PushConfig]
    encode_push: Callable[[PushConfig], dict[str, Any]]
    push_list: Callable[[list[dict[str, Any]]], Any]


def _configs(configs: list[dict[str, Any]]) -> Any:
    return {"configs": configs}


JSONRPC = Wire(
    decode_send=json_v03.decode_send,
    inline_push="configuration.pushNotificationConfig",
    replies=Replies(json_v03.encode_task, json_v03.encode_message, json_v03.encode_event, oneof=False),
    decode_push_set=pushconfig.decode_v03_set,
    encode_push=pushconfig.encode_v03,
    push_list=list,
)
REST = Wire(
    decode_send=protojson_v03.decode_send,
    inline_push="configuration.pushNotification",
    replies=Replies(
        protojson_v03.encode_task, protojson_v03.encode_message, protojson_v03.encode_event, oneof=True
    ),
    decode_push_set=protojson_v03.decode_push_create,
    encode_push=pushconfig.encode_v03_proto,
    push_list=_configs,
)

Handler = Callable[[Any, Call, Wire], Awaitable[Any]]
StreamHandler = Callable[[Any, Call, Wire], Awaitable[Stream]]


async def send(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    message, config, push = wire.decode_send(params)
    webhook = pushconfig.decode(push, "0.3", wire.inline_push) if push is not None else None
    call = await for_send(params, message, call, config.task_id)
    result = await call.c.service.send(
        call.owner, await admit(message, call), config, webhook, call.idempotency_key
    )
    return wire.replies.result(result, config.history_length)


async def stream(params: Any, call: Call, wire: Wire = JSONRPC) -> Stream:
    message, config, push = wire.decode_send(params)
    webhook = pushconfig.decode(push, "0.3", wire.inline_push) if push is not None else None
    call = await for_send(params, message, call, config.task_id)
    items = await call.c.service.stream(
        call.owner, await admit(message, call), webhook, config, call.idempotency_key
    )
    return items, wire.replies.stream(config.history_length)


LEGACY = replace(JSONRPC, decode_send=json_v03.decode_legacy_send, inline_push="pushNotification")
"""The pre-0.3 `tasks/send` and `tasks/sendSubscribe`: their params, answered in v0.3 JSON-RPC shapes."""


async def legacy_send(params: Any, call: Call, wire: Wire = LEGACY) -> Any:
    return await send(params, call, LEGACY)


async def legacy_stream(params: Any, call: Call, wire: Wire = LEGACY) -> Stream:
    return await stream(params, call, LEGACY)


async def get(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    task_id, history_length = json_v03.decode_task_query(params)
    call = await by_task(call, task_id)
    task = await call.c.service.get(call.owner, task_id, history_length)
    return wire.replies.encode_task(task, history_length)


async def cancel(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    task_id, _ = json_v03.decode_task_id(params)
    call = await by_task(call, task_id)
    return wire.replies.encode_task(await call.c.service.cancel(call.owner, task_id))


async def resubscribe(params: Any, call: Call, wire: Wire = JSONRPC) -> Stream:
    """The task first, then its events until it ends; a finished task: the task, then the end."""
    task_id, _ = json_v03.decode_task_id(params)
    call = await by_task(call, task_id)
    after = last_event_id(call, params)
    items = await call.c.service.resubscribe(call.owner, task_id, after)
    return items, wire.replies.stream()


async def set_push(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    """`tasks/pushNotificationConfig/set`: the stored config (server id if none given), redacted."""
    cfg = wire.decode_push_set(params)
    call = await by_task(call, cfg.task_id)
    stored = await call.c.service.set_push_config(call.owner, cfg.task_id, cfg)
    return wire.encode_push(stored)


async def get_push(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    """`tasks/pushNotificationConfig/get`; without a config id (deprecated form), the task's first."""
    task_id, config_id = pushconfig.decode_v03_ref(params)
    call = await by_task(call, task_id)
    return wire.encode_push(await call.c.service.get_push_config(call.owner, task_id, config_id))


async def list_push(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    task_id, _ = pushconfig.decode_v03_ref(params)
    call = await by_task(call, task_id)
    configs, _ = await call.c.service.list_push_configs(call.owner, task_id)
    return wire.push_list([wire.encode_push(c) for c in configs])


async def delete_push(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    task_id, config_id = pushconfig.decode_v03_ref(params, need_config=True)
    call = await by_task(call, task_id)
    assert config_id is not None
    await call.c.service.delete_push_config(call.owner, task_id, config_id)
    return None


async def extended_card(params: Any, call: Call, wire: Wire = JSONRPC) -> Any:
    """The authenticated extended card, hybrid (a v0.3 client reads its v0.3 fields); the guard has
    already authenticated the caller."""
    if call.c.extended_card is None:
        raise ExtendedAgentCardNotConfiguredError()
    return orjson.loads(call.c.extended_card.at(call.headers.get("host")).hybrid.body)


async def agent_card(params: Any, call: Call, wire: Wire = REST) -> Any:
    """GetAgentCard of the v0.3 proto (REST `GET /v1/card`, gRPC): the authenticated extended card when
    one is configured, else the public one, as the proto's AgentCard."""
    card = (call.c.extended_card or call.c.card).at(call.headers.get("host"))
    return protojson_v03.encode_card(orjson.loads(card.hybrid.body))


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
    "agent/authenticatedExtendedCard": extended_card,
    "tasks/send": legacy_send,
    "tasks/pushNotification/set": set_push,
    "tasks/pushNotification/get": get_push,
}
STREAMING: dict[str, StreamHandler] = {
    "message/stream": stream,
    "tasks/resubscribe": resubscribe,
    "tasks/sendSubscribe": legacy_stream,
}
