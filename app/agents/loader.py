"""Choosing the agent from the `AGENT_ADAPTER` setting: a built-in name or `module:attr`."""

from __future__ import annotations

import importlib

from .base import Agent
from .claude import ClaudeAgent
from .codex import CodexAgent
from .cursor import CursorAgent
from .echo import EchoAgent
from .gemini import GeminiAgent
from .ndjson import NdjsonAgent
from .scripted import ScriptedAgent

BUILTIN: dict[str, type[Agent]] = {
    "echo": EchoAgent,
    "scripted": ScriptedAgent,
    "claude-code": ClaudeAgent,
    "cursor": CursorAgent,
    "ndjson": NdjsonAgent,
    "codex": CodexAgent,
    "gemini": GeminiAgent,
}


class AdapterError(ValueError):
    """The adapter setting names nothing loadable; the message says why in one line."""


def load_agent(spec: str) -> Agent:
    """Instantiate the agent named by `spec`: `echo`, `scripted`, or `package.module:attr`.

    `attr` may be an Agent subclass, a factory returning an Agent, or an Agent instance.
    """
    if spec in BUILTIN:
        try:
            return BUILTIN[spec]()
        except ValueError as exc:
            raise AdapterError(str(exc)) from None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(BUILTIN))
        raise AdapterError(f"unknown adapter {spec!r}: use one of {names} or 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterError(f"cannot import adapter module {module_name!r}: {exc}") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise AdapterError(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, Agent):
        return target
    if isinstance(target, type) and not issubclass(target, Agent):
        raise AdapterError(f"{spec!r} is a class but not an Agent subclass")
    if not callable(target):
        raise AdapterError(f"{spec!r} is not an Agent (got {type(target).__name__})")
    try:
        agent = target()
    except Exception as exc:
        raise AdapterError(f"creating the agent {spec!r} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(agent, Agent):
        raise AdapterError(f"{spec!r} did not produce an Agent (got {type(agent).__name__})")
    return agent
