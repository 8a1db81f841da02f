"""Recognising a copy of a send: a retried first message (its retry key), a retried follow-up (already in
the task's history), and an `Idempotency-Key` with the fingerprint of its request (`Copies`)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from app.protocol.errors import InvalidParamsError
from app.protocol.model import Message, PushConfig, Role, SendConfig, Task
from app.store.idempotency import IdemKey, IdempotencyKeys
from app.store.repo import Repository
from app.store.write import Write
from app.store.writer import Writer

MAX_KEY_CHARS = 256


class IdempotencyKeyReusedError(InvalidParamsError):
    """The Idempotency-Key was used before with another request: `-32602`, and 422 over REST."""

    http_status = 422


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def retry_key(message: Message, role: str | None = None) -> str:
    """A new message as its retry is recognised: messageId, parts, and taskId/contextId as sent (and the
    role it was sent to, when the deployment has several: the same message to two roles is two tasks)."""
    parts = [p.to_store() for p in message.parts]
    key = [message.message_id, parts, message.task_id, message.context_id]
    return _digest(key if role is None else [*key, role])


def fingerprint(message: Message, config: SendConfig, push: PushConfig | None) -> str:
    """What an Idempotency-Key's request asked, whatever the wire version or binding: the message, the
    webhook and the result's shape (`blocking` only changes how long the answer waits)."""
    body = message.to_store()
    body.pop("requestedExtensions", None)
    body.pop("activeExtensions", None)
    if config.made_message_id:
        del body["messageId"]
    return _digest([body, config.history_length, config.accepted_output_modes, push])


def idem_key(key: str, message: Message, config: SendConfig, push: PushConfig | None) -> IdemKey | None:
    """The request's Idempotency-Key (the draft's quoted sf-string or bare) with its fingerprint."""
    key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not key:
        return None
    if len(key) > MAX_KEY_CHARS:
        raise InvalidParamsError(f"Idempotency-Key may have at most {MAX_KEY_CHARS} characters")
    return IdemKey(key, fingerprint(message, config, push))


def in_history(task: Task, message: Message) -> bool:
    """Whether the task has taken this user message (same messageId and parts)."""
    parts = [p.to_store() for p in message.parts]
    return any(
        m.role is Role.USER
        and m.message_id == message.message_id
        and [p.to_store() for p in m.parts] == parts
        for m in task.history
    )


class Copies:
    """Finds what an earlier copy of a send made, and keeps the Idempotency-Keys (`keys` None: the header
    is ignored)."""

    def __init__(self, keys: IdempotencyKeys | None, repo: Repository, writer: Writer) -> None:
        self._keys = keys
        self._repo = repo
        self._writer = writer

    def key(
        self, key: str | None, message: Message, config: SendConfig, push: PushConfig | None
    ) -> IdemKey | None:
        return None if key is None or self._keys is None else idem_key(key, message, config, push)

    async def earlier(self, owner: str, idem: IdemKey | None, retry: str | None) -> str | Message | None:
        """What an earlier copy of this send made, if there is one: the Idempotency-Key's, else, given a
        retry key, the running task the same first message started."""
        if idem is not None and self._keys is not None:
            stored = await self._keys.find(owner, idem.key)
            if stored is not None:
                if stored.fingerprint != idem.fingerprint:
                    raise IdempotencyKeyReusedError(
                        f"Idempotency-Key {idem.key} was already used with a different request body",
                        {"idempotencyKey": idem.key},
                    )
                if stored.reply is not None:
                    return stored.reply
                if stored.task_id is not None:
                    return stored.task_id
        if retry is not None:
            task_id = await self._repo.find_retry(owner, retry)
            if task_id is not None:
                await self.remember(owner, idem, task_id=task_id)
                return task_id
        return None

    async def remember(
        self, owner: str, idem: IdemKey | None, *, task_id: str | None = None, reply: Message | None = None
    ) -> None:
        """Store the Idempotency-Key on its own, for what was made without a task write of this request."""
        if idem is not None and self._keys is not None:
            await self._writer.commit(
                Write(idempotency_key=self._keys.row(owner, idem, task_id=task_id, reply=reply))
            )

    def row(self, owner: str, idem: IdemKey | None, task_id: str) -> dict[str, Any] | None:
        """The Idempotency-Key's row, written with the task it names."""
        return self._keys.row(owner, idem, task_id=task_id) if idem is not None and self._keys else None
