"""What the routers share: the wired-up components, reached through `app.state`, and the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.protocol.errors import UnauthenticatedError
from app.settings import Settings
from app.tasks.service import TaskService

PRINCIPAL_KEY = "a2a.principal"
"""Where the guard middleware leaves the authenticated principal in the ASGI scope."""


@dataclass(slots=True)
class Components:
    settings: Settings
    service: TaskService
    card: Any
    input_modes: tuple[str, ...] = ("text/plain",)
    extended_card: Any = None
    """The authenticated extended card (a `card.Card`), or None when none is configured."""
    limits: Any = None
    """The per-principal limits (`limits.Limits`)."""


def components(request: Request) -> Components:
    return request.app.state.components


def owner_of(request: Request) -> str:
    """The authenticated principal's name: the owner of every row the call may see or create.

    Fails closed: a request that did not pass the guard has no owner and gets a 401.
    """
    principal = request.scope.get(PRINCIPAL_KEY)
    if principal is None:
        raise UnauthenticatedError()
    return principal.name
