"""Roles: the agents one deployment serves, each under its own name, card and endpoints.

`AGENTS` (a JSON object) or `AGENTS_FILE` (YAML or JSON) maps a role name to its adapter, the adapter's
options and card overrides. Without either, today's `AGENT_ADAPTER` and `AGENT_*` settings are the one role
`default`. Every role answers under `/agents/{role}/`, whatever its place in the file; the default role
(the one named `default`, else the first listed) also answers at the root endpoints. `AGENT_ROLES` says
which roles this process runs agents for; every process serves calls for all.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.agents.loader import AdapterError, load_agent
from app.agents.options import AgentOptions
from app.agents.sdk import Agent
from app.settings import SettingError, Settings
from app.telemetry import logs

ROLE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
DEFAULT = "default"


class CardOverrides(BaseModel):
    """What a role's card says instead of its agent's own name, description and skills."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=4000)
    skills: list[dict[str, Any]] | None = None


class RepositoryEntry(BaseModel):
    """A role's default repository: what a task that names none works on (checked against REPO_ALLOW)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    ref: str | None = None


class RoleEntry(BaseModel):
    """One entry of `AGENTS`. Every field but `adapter` falls back to the server-wide `AGENT_*` setting."""

    model_config = ConfigDict(extra="forbid")

    adapter: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the adapter's class or factory (as AGENT_OPTIONS)."""
    bin: str | None = None
    """The CLI binary (as CLAUDE_BIN, CODEX_BIN, ...)."""
    model: str | None = None
    models: list[Annotated[str, Field(pattern=r"^\S{1,200}$")]] | None = None
    """The models a task may choose (`metadata.model`), the role's `model` always among them (as
    AGENT_MODELS); unset: only the role's own."""
    command: str | None = None
    env: dict[str, str] | None = None
    env_passthrough: list[str] | None = None
    egress_allow: list[str] | None = None
    sandbox_read: list[str] | None = None
    slots: int | None = Field(default=None, ge=1)
    """Agent runs of this role one process runs at once (as MAX_CONCURRENT_TASKS)."""
    timeout_s: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    """The most a task of the role may spend, in US dollars (as BUDGET_TASK_USD); a task may ask less."""
    idle_timeout_s: float | None = Field(default=None, gt=0)
    repository: RepositoryEntry | None = None
    """The repository a task naming none works on (a coding-agent CLI's role only)."""
    force: bool | None = None
    """Run unattended, the CLI's permission prompts skipped (as AGENT_FORCE); false: approvals round-trip."""
    push: bool | None = None
    """A task may ask its branch pushed to its remote (as REPO_PUSH; a coding-agent CLI's role only)."""
    push_token_file: str | None = Field(default=None, min_length=1)
    push_username: str | None = Field(default=None, min_length=1)
    push_ssh_key_file: str | None = Field(default=None, min_length=1)
    """The credentials the server's own git pushes with (as REPO_PUSH_*): files no agent sees."""
    card: CardOverrides = Field(default_factory=CardOverrides)


@dataclass(frozen=True, slots=True)
class Role:
    """A role as this process serves it."""

    name: str
    entry: RoleEntry
    slots: int
    timeout_s: float
    runs_here: bool
    """Whether this process runs the role's agents (`AGENT_ROLES`); it serves calls for it either way."""
    models: tuple[str, ...] = ()
    """The models a task of the role may choose (`metadata.model`): its `models` and its own `model`."""
    budget_usd: float | None = None
    """The most a task of the role may spend (`budget_usd`, else BUDGET_TASK_USD; None: no cap)."""
    path: str = field(default="")
    """The URL prefix of its endpoints, `/agents/{role}` for every role (the default one's root endpoints
    are an alias); empty only for a role built outside `load`."""
    default: bool = False
    """Whether the root endpoints are this role's."""


def load(settings: Settings) -> dict[str, Role]:
    """The roles the settings configure, the default one first. Raises SettingError naming the role and
    the field of a bad entry, in one line."""
    raw = _raw_entries(settings)
    if raw is None:
        entries = {DEFAULT: RoleEntry(adapter=settings.agent_adapter, options=dict(settings.agent_options))}
    else:
        entries = {}
        for name, value in raw.items():
            if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
                raise SettingError(
                    "AGENTS", f"role name {name!r} must match {ROLE_NAME.pattern} (it is part of URLs)"
                )
            try:
                entries[name] = RoleEntry.model_validate(value)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"]) or "entry"
                raise SettingError("AGENTS", f"role {name!r}, field {where}: {err['msg']}") from None
        if not entries:
            raise SettingError("AGENTS", "no role configured (an empty object)")
    names = list(entries)
    default = DEFAULT if DEFAULT in entries else names[0]
    ordered = [default, *(n for n in names if n != default)]
    running = _split(settings.agent_roles)
    unknown = [r for r in running if r not in entries]
    if unknown:
        raise SettingError(
            "AGENT_ROLES",
            f"AGENT_ROLES names {', '.join(unknown)}, not configured in AGENTS ({', '.join(names)})",
        )
    roles = {}
    for name in ordered:
        entry = entries[name]
        roles[name] = Role(
            name=name,
            entry=entry,
            slots=entry.slots or settings.max_concurrent_tasks,
            timeout_s=entry.timeout_s or settings.agent_timeout_s,
            runs_here=not running or name in running,
            models=_models(entry, settings),
            budget_usd=entry.budget_usd or settings.budget_task_usd,
            path=f"/agents/{name}",
            default=name == default,
        )
    return roles


def _models(entry: RoleEntry, settings: Settings) -> tuple[str, ...]:
    """The models a task of the role may choose: its `models` (else AGENT_MODELS), its own model first."""
    listed = entry.models if entry.models is not None else _split(settings.agent_models)
    own = entry.model or settings.agent_model
    return tuple(dict.fromkeys([*([own] if own else []), *listed]))


def _raw_entries(settings: Settings) -> dict[Any, Any] | None:
    if settings.agents and settings.agents_file:
        raise SettingError("AGENTS", "set AGENTS or AGENTS_FILE, not both")
    if settings.agents:
        return dict(settings.agents)
    if not settings.agents_file:
        return None
    path = Path(settings.agents_file)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SettingError("AGENTS_FILE", f"cannot read {path}: {exc.strerror}") from None
    try:
        loaded = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingError("AGENTS_FILE", f"{path} is not valid YAML or JSON: {exc}") from None
    if isinstance(loaded, dict) and isinstance(loaded.get("agents"), dict):
        loaded = loaded["agents"]
    if not isinstance(loaded, dict):
        raise SettingError("AGENTS_FILE", f"{path} must hold an object of roles")
    return loaded


def _split(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


CLI_ADAPTERS = frozenset({"claude-code", "codex", "gemini", "cursor"})
"""The built-in adapters that run a CLI binary (a role's `bin`)."""
REPO_ADAPTERS = CLI_ADAPTERS | {"ndjson"}
"""The built-in adapters that work on a task's repository (a role's `repository`); a Python agent
(`module:attr`) does when it declares `workspace = True`, checked once it is loaded."""


def agent_options(base: AgentOptions, role: Role, named: bool = True) -> AgentOptions:
    """What the role's adapter runs with: the server-wide options (`AgentOptions.from_settings`), the role's
    entry over them (its environment added to the server-wide one, lists replacing theirs), checked again.
    `named`: errors name the role's entry in AGENTS (False for the one role of a server without AGENTS)."""
    e = role.entry
    changes: dict[str, Any] = {"role": role.name if named else None}
    if e.bin is not None:
        if e.adapter not in CLI_ADAPTERS:
            raise SettingError(
                "AGENTS", f"role {role.name!r}, field bin: adapter {e.adapter!r} runs no CLI binary"
            )
        changes["bin"] = e.bin
    if e.model is not None:
        changes["model"] = e.model
    if e.command is not None:
        changes["command"] = e.command
    if e.env is not None:
        changes["env"] = {**base.env, **e.env}
    if e.env_passthrough is not None:
        changes["env_passthrough"] = tuple(e.env_passthrough)
    if e.egress_allow is not None:
        changes["egress_allow"] = ",".join(e.egress_allow)
    if e.sandbox_read is not None:
        changes["sandbox_read"] = tuple(e.sandbox_read)
    if e.idle_timeout_s is not None:
        changes["idle_timeout_s"] = e.idle_timeout_s
    if e.force is not None:
        changes["force"] = e.force
    if e.repository is not None:
        if e.adapter not in REPO_ADAPTERS and ":" not in e.adapter:  # a Python agent's: `workspace.attach`
            raise SettingError(
                "AGENTS",
                f"role {role.name!r}, field repository: adapter {e.adapter!r} works on no repository",
            )
        changes["repository"] = e.repository.model_dump(exclude_none=True)
    for name in ("push", "push_token_file", "push_username", "push_ssh_key_file"):
        value = getattr(e, name)
        if value is None:
            continue
        if e.adapter not in REPO_ADAPTERS:
            raise SettingError(
                "AGENTS", f"role {role.name!r}, field {name}: adapter {e.adapter!r} works on no repository"
            )
        changes[name] = value
    return dataclasses.replace(base, **changes)


def _push_token(options: AgentOptions) -> list[str]:
    """The role's push token, for the logs to mask (it is read again at each push)."""
    token = options.push_credentials.token() if options.push_token_file else None
    return [token] if token else []


def role_agent(settings: Settings, role: Role, several: bool, base: AgentOptions | None = None) -> Agent:
    """The role's agent, given the options built for its role (never the server's whole settings): the
    role's over the server-wide ones (`base`, built from `settings` when not given). A failure names the
    role."""
    named = several or role.name != DEFAULT or bool(settings.agents or settings.agents_file)
    base = base or AgentOptions.from_settings(settings)
    try:
        options = agent_options(base, role, named)
        # The agents' environment may hold their API keys: masked in every log record from now on.
        passed = (os.environ[n] for n in options.env_passthrough if n in os.environ)
        logs.add_secrets([*options.env.values(), *passed, *_push_token(options)])
        return load_agent(role.entry.adapter, role.entry.options, agent_options=options)
    except (AdapterError, SettingError) as exc:
        if not named or (isinstance(exc, SettingError) and exc.name == "AGENTS"):
            raise
        field = "options" if isinstance(exc, AdapterError) and exc.options else "adapter"
        if isinstance(exc, SettingError):
            field = exc.name.lower()
        raise SettingError("AGENTS", f"role {role.name!r}, field {field}: {exc}") from None
