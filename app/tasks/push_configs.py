"""The push notification config calls: set, get, list and delete a task's webhooks, each on the caller's
own task, and the SSRF check of a webhook's URL at registration."""

from __future__ import annotations

import base64

from app import ssrf
from app.protocol.errors import InvalidParamsError, PushNotificationNotSupportedError, TaskNotFoundError
from app.protocol.model import PushConfig
from app.push.configs import PushConfigs

from .control import Control
from .follow import Reader


class PushConfigCalls:
    """A task's webhooks; without a config store (`configs` None) every call is unsupported."""

    def __init__(
        self, configs: PushConfigs | None, policy: ssrf.Policy, reader: Reader, control: Control
    ) -> None:
        self._configs = configs
        self._policy = policy
        self._reader = reader
        self._control = control

    def _store(self) -> PushConfigs:
        if self._configs is None:
            raise PushNotificationNotSupportedError()
        return self._configs

    async def check_url(self, url: str) -> None:
        """The SSRF guard at registration: a refused URL is the client's error, with the reason."""
        try:
            await ssrf.check(url, self._policy)
        except ssrf.Refused as exc:
            raise InvalidParamsError(f"Push notification URL refused: {exc}", {"url": url}) from None

    async def set(self, owner: str, task_id: str, config: PushConfig) -> PushConfig:
        """Add (or replace, by id) a webhook of the caller's task; its events from now on go to it."""
        configs = self._store()
        await self._reader.load(owner, task_id)
        await self.check_url(config.url)
        stored = await configs.put(owner, task_id, config)
        await self._control.webhook_added(owner, task_id)
        return stored

    async def get(self, owner: str, task_id: str, config_id: str | None) -> PushConfig:
        await self._reader.load(owner, task_id)
        found = await self._store().get(owner, task_id, config_id)
        if found is None:
            what = f"push notification config {config_id}" if config_id else "push notification config"
            raise TaskNotFoundError(
                f"Task {task_id} has no {what}", {"taskId": task_id, "configId": config_id or ""}
            )
        return found

    async def list(
        self, owner: str, task_id: str, page_size: int | None = None, page_token: str | None = None
    ) -> tuple[list[PushConfig], str]:
        """The task's webhooks in creation order, a page at a time (the token is opaque)."""
        await self._reader.load(owner, task_id)
        after = 0
        if page_token:
            try:
                after = int(base64.urlsafe_b64decode(page_token.encode()).decode())
            except (ValueError, UnicodeDecodeError):
                raise InvalidParamsError("pageToken is not one this server issued") from None
        configs, cursor = await self._store().list(owner, task_id, page_size, after)
        token = base64.urlsafe_b64encode(str(cursor).encode()).decode() if cursor is not None else ""
        return configs, token

    async def delete(self, owner: str, task_id: str, config_id: str) -> None:
        """Remove a webhook and what it had not received yet; a second delete is a no-op."""
        await self._reader.load(owner, task_id)
        await self._store().delete(owner, task_id, config_id)
