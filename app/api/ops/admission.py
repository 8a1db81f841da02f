"""Per-message and per-principal limits: parts and text per message, new tasks per minute, open streams.

The per-principal limits live in `app.limits`: in memory for one process, in Redis when `REDIS_URL` is set,
so that behind a load balancer every replica counts against the same numbers. Every limit answers with its
own clear error, before anything is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from app.limits import Limits, Slot
from app.protocol.errors import InvalidParamsError
from app.protocol.model import Message

from .calls import Call, Item, Stream, accept_message


async def admit(message: Message, call: Call) -> Message:
    """Everything a message must pass before it is stored: media types, size, and the task rate."""
    accept_message(message, call)
    limits: Limits = call.c.limits
    if len(message.parts) > limits.max_parts:
        raise InvalidParamsError(
            f"A message may have at most {limits.max_parts} parts; this one has {len(message.parts)}",
            {"maxParts": limits.max_parts},
        )
    text = sum(len(p.text) for p in message.parts if p.text)
    if text > limits.max_text:
        raise InvalidParamsError(
            f"A message may carry at most {limits.max_text} characters of text; this one has {text}",
            {"maxTextChars": limits.max_text},
        )
    if not message.task_id:
        await limits.rate.take(call.owner)
    return message


class _HeldStream:
    """The stream's items; the slot is freed exactly once, when they end or are closed (even unstarted)."""

    def __init__(self, items: AsyncIterator[Item], release: Callable[[], None]) -> None:
        self._items = items
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> _HeldStream:
        return self

    async def __anext__(self) -> Item:
        try:
            return await anext(self._items)
        except BaseException:
            self._free()
            raise

    def _free(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    async def aclose(self) -> None:
        self._free()
        await self._items.aclose()  # type: ignore[attr-defined]


async def open_stream(call: Call, start: Callable[[], Awaitable[Stream]]) -> Stream:
    """Start a stream within the caller's cap; the slot is freed when the stream ends or fails to start."""
    slot: Slot = await call.c.limits.streams.acquire(call.owner)
    try:
        items, encode = await start()
    except BaseException:
        slot.release()
        raise
    return _HeldStream(items, slot.release), encode
