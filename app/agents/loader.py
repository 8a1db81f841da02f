"""Choosing the agent from the `AGENT_ADAPTER` setting: a built-in name or `module:attr`."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .cli.claude import ClaudeAgent
from .cli.codex import CodexAgent
from .cli.cursor import CursorAgent
from .cli.gemini import GeminiAgent
from .cli.ndjson import NdjsonAgent
from .cli.run import CliAgent
from .echo import EchoAgent
from .errors import SettingError
from .options import AgentOptions
from .scripted import ScriptedAgent
from .sdk import Agent
from .workspace import attach

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
    """The adapter setting names nothing loadable; the message says why in one line. `options` is
    true when the agent refused its AGENT_OPTIONS."""

    def __init__(self, message: str, options: bool = False) -> None:
        super().__init__(message)
        self.options = options


def load_agent(spec: str, options: dict[str, Any] | None = None, *, agent_options: AgentOptions) -> Agent:
    """Instantiate the agent named by `spec`: a built-in name or `package.module:attr`.

    `attr` may be an Agent subclass, a factory returning an Agent, or an Agent instance; `options`
    (the `AGENT_OPTIONS` setting) are passed to the class or factory as keyword arguments. A CLI
    adapter (a `CliAgent` subclass) also gets `agent_options` (`AgentOptions.from_settings`, or a
    role's), first; never the server's settings; any other that declares `workspace` gets their repository
    rules (`workspace.attach`; a role's `repository` for one that does not is a SettingError). Modules
    are found from the working directory too, so `AGENT_ADAPTER=myagent:MyAgent` works beside it.
    """
    options = options or {}
    if spec in BUILTIN:
        return _create(spec, BUILTIN[spec], options, agent_options)
    agent = _load(spec, options, agent_options)
    if agent.workspace and agent.pure:
        raise AdapterError(
            f"{spec!r} declares both `workspace` and `pure`: an agent that works on files has effects"
        )
    attach(agent, agent_options)
    return agent


def _load(spec: str, options: dict[str, Any], agent_options: AgentOptions) -> Agent:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(BUILTIN))
        raise AdapterError(f"unknown adapter {spec!r}: use one of {names} or 'module:attr'")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AdapterError(f"cannot import adapter module {module_name!r}: {exc}") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise AdapterError(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, Agent):
        if options:
            message = f"{spec!r} is an Agent instance; AGENT_OPTIONS needs a class or factory"
            raise AdapterError(message, options=True)
        return target
    if isinstance(target, type) and not issubclass(target, Agent):
        raise AdapterError(f"{spec!r} is a class but not an Agent subclass")
    if not callable(target):
        raise AdapterError(f"{spec!r} is not an Agent (got {type(target).__name__})")
    return _create(spec, target, options, agent_options)


def _create(spec: str, factory: Any, options: dict[str, Any], agent_options: AgentOptions) -> Agent:
    try:
        if isinstance(factory, type) and issubclass(factory, CliAgent):
            agent = factory(agent_options, **options)
        else:
            agent = factory(**options)
    except SettingError:
        raise
    except Exception as exc:
        message = f"creating the agent {spec!r} failed: {type(exc).__name__}: {exc}"
        raise AdapterError(message, options=bool(options)) from None
    if not isinstance(agent, Agent):
        raise AdapterError(f"{spec!r} did not produce an Agent (got {type(agent).__name__})")
    return agent
