"""What the routers share: the wired-up components, reached through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.settings import Settings
from app.tasks.service import TaskService

ANONYMOUS = "anonymous"
"""The principal of every caller until authentication lands."""


@dataclass(slots=True)
class Components:
    settings: Settings
    service: TaskService
    card: Any
    input_modes: tuple[str, ...] = ("text/plain",)


def components(request: Request) -> Components:
    return request.app.state.components


def owner_of(request: Request) -> str:
    return ANONYMOUS
