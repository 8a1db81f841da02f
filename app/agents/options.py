"""`AgentOptions`: what a coding-agent CLI adapter and its jail run with, instead of the server's `Settings`.

The server-wide options come from the settings (`AgentOptions.from_settings`); a role's overrides are applied
with `dataclasses.replace`, which checks the result again (`__post_init__`). Adapters and the jail read
nothing else: no database URL, no credentials, never the settings themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from sqlalchemy.engine import make_url

from app.options import from_attributes
from app.ssrf import IPNetwork, Policy as UrlPolicy

from .errors import SettingError
from .jail.egress import Allowed, parse_allow
from .repos.credentials import TOKEN_USER, Credentials, check_key_file, read_token
from .repos.errors import RepoError
from .repos.policy import METADATA_KEY, RepoPolicy
from .repos.source import RepoSource, parse_allow as parse_repo_allow

SETTING_OF: dict[str, str] = {
    "workspace_root": "AGENT_WORKSPACE_ROOT",
    "repo_path": "AGENT_REPO_PATH",
    "sandbox": "AGENT_SANDBOX",
    "network": "AGENT_NETWORK",
    "egress_allow": "AGENT_EGRESS_ALLOW",
    "env": "AGENT_ENV",
    "env_passthrough": "AGENT_ENV_PASSTHROUGH",
    "sandbox_read": "AGENT_SANDBOX_READ",
    "home_seed": "AGENT_HOME_SEED",
    "idle_timeout_s": "AGENT_IDLE_TIMEOUT_S",
    "force": "AGENT_FORCE",
    "model": "AGENT_MODEL",
    "command": "AGENT_COMMAND",
    "cancel_grace_s": "CANCEL_GRACE_S",
    "checkpoint_s": "CHECKPOINT_S",
    "owner": "REPLICA_ID",
    "database_file": "DATABASE_URL",
    "claude_bin": "CLAUDE_BIN",
    "codex_bin": "CODEX_BIN",
    "gemini_bin": "GEMINI_BIN",
    "cursor_bin": "CURSOR_BIN",
    "repo_allow": "REPO_ALLOW",
    "repo_cache_root": "REPO_CACHE_ROOT",
    "repo_max_diff_bytes": "REPO_MAX_DIFF_BYTES",
    "repo_git_timeout_s": "REPO_GIT_TIMEOUT_S",
    "push": "REPO_PUSH",
    "push_token_file": "REPO_PUSH_TOKEN_FILE",
    "push_username": "REPO_PUSH_USERNAME",
    "push_ssh_key_file": "REPO_PUSH_SSH_KEY_FILE",
    "attachment_max_bytes": "ATTACHMENT_MAX_BYTES",
    "attachment_max_total_bytes": "ATTACHMENT_MAX_TOTAL_BYTES",
    "attachment_url_allowed_hosts": "ATTACHMENT_URL_ALLOWED_HOSTS",
    "attachment_url_allowed_cidrs": "ATTACHMENT_URL_ALLOWED_CIDRS",
    "attachment_url_timeout_s": "ATTACHMENT_URL_TIMEOUT_S",
}
"""The server-wide setting behind each field (`bin` has none of its own: the adapter's `*_BIN`): what
errors name, and what `from_settings` reads (its attribute, the name in lower case)."""
ROLE_FIELDS = frozenset(
    {
        "bin",
        "model",
        "env",
        "env_passthrough",
        "egress_allow",
        "sandbox_read",
        "idle_timeout_s",
        "force",
        "command",
        "repository",
        "push",
        "push_token_file",
        "push_username",
        "push_ssh_key_file",
    }
)
"""The fields a role's entry in AGENTS may set (its `bin`, `model`, ...); the others are server-wide."""


def replica_tag(replica_id: str, database_url: str) -> str:
    """`replica:<REPLICA_ID>@<digest of its database>`: a replica's next life finds what it left, and two
    deployments on one host that reuse a REPLICA_ID (`a2a-1`, or hostname:port in another folder) never
    kill each other's CLIs as their own orphans. The database, not the folder, names the deployment: its
    replicas share it and each life of one serves it. Its password is left out (rotating it keeps the tag),
    a relative SQLite path is resolved, and only a digest reaches the CLI's environment."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database:
        url = url.set(database=str(Path(url.database).resolve()))
    digest = hashlib.sha256(url.render_as_string(hide_password=True).encode()).hexdigest()[:16]
    return f"replica:{replica_id}@{digest}"


class ServerSettings(Protocol):
    """What `from_settings` reads of the server's settings (`settings.Settings`, not imported here)."""

    agent_workspace_root: str
    agent_repo_path: str | None
    agent_sandbox: Literal["bwrap", "none"]
    agent_egress_allow: str
    agent_env: dict[str, str]
    agent_home_seed: str | None
    agent_idle_timeout_s: float
    agent_force: bool
    agent_model: str | None
    agent_command: str | None
    cancel_grace_s: float
    checkpoint_s: float
    claude_bin: str
    codex_bin: str
    gemini_bin: str
    cursor_bin: str
    replica_id: str
    database_url: str
    repo_allow: str
    repo_cache_root: str
    repo_max_diff_bytes: int
    repo_git_timeout_s: float
    repo_push: bool
    repo_push_token_file: str | None
    repo_push_username: str | None
    repo_push_ssh_key_file: str | None
    attachment_max_bytes: int
    attachment_max_total_bytes: int
    attachment_url_allowed_hosts: str
    attachment_url_allowed_cidrs: str
    attachment_url_timeout_s: float

    @property
    def agent_network_mode(self) -> Literal["host", "egress"]: ...
    @property
    def agent_passthrough_names(self) -> list[str]: ...
    @property
    def agent_sandbox_read_paths(self) -> list[str]: ...


@dataclass(frozen=True)
class AgentOptions:
    """What one agent's CLI runs with. The defaults are the settings' defaults."""

    workspace_root: str = "./data/workspaces"
    """Parent of the per-principal workspaces and CLI HOMEs (AGENT_WORKSPACE_ROOT)."""
    repo_path: str | None = None
    """The one folder every run works in (AGENT_REPO_PATH); None: a workspace per context."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    network: Literal["host", "egress"] = "egress"
    """Resolved: AGENT_NETWORK, or egress in the jail and host without it."""
    egress_allow: str = ""
    """Comma-separated `host[:port]` the CLI may reach with egress (checked here)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables every CLI gets (AGENT_ENV)."""
    env_passthrough: tuple[str, ...] = ()
    """Names of the server's variables copied into every CLI's environment."""
    sandbox_read: tuple[str, ...] = ()
    """Extra paths the jailed CLI may read."""
    home_seed: str | None = None
    idle_timeout_s: float = 900.0
    force: bool = True
    model: str | None = None
    command: str | None = None
    """The `ndjson` adapter's command line."""
    bin: str | None = None
    """The CLI's executable; None: the adapter's default below (`claude_bin`, ...)."""
    cancel_grace_s: float = 5.0
    checkpoint_s: float = 120.0
    """How often a running CLI's workspace and session are saved as its task's checkpoint, beside each
    end of a turn and a clean shutdown (CHECKPOINT_S; `cli/checkpoint.py`)."""
    claude_bin: str = "claude"
    codex_bin: str = "codex"
    gemini_bin: str = "gemini"
    cursor_bin: str = "cursor-agent"
    owner: str = ""
    """The tag the CLI processes carry so a restarted replica (or worker) kills what its previous life left,
    and nothing else's ("": untagged): `replica_tag` in a server, `worker:<instance>:<root>` on a worker."""
    database_file: str | None = None
    """The SQLite database file, which no AGENT_SANDBOX_READ path may show (None with PostgreSQL)."""
    repo_allow: str = ""
    """Comma-separated URL prefixes and local folders a task's repository may come from (REPO_ALLOW)."""
    repo_cache_root: str = "./data/repos"
    """The repositories' mirrors (REPO_CACHE_ROOT): outside the workspace root, never in a jail."""
    repo_max_diff_bytes: int = 1024 * 1024
    repo_git_timeout_s: float = 600.0
    attachment_max_bytes: int = 5 * 1024 * 1024
    attachment_max_total_bytes: int = 8 * 1024 * 1024
    attachment_url_allowed_hosts: str = ""
    """Comma-separated hosts a file by URL may come from whatever they resolve to (no address check)."""
    attachment_url_allowed_cidrs: str = ""
    """Comma-separated networks a file by URL may come from even when private (e.g. 10.0.0.0/8)."""
    attachment_url_timeout_s: float = 30.0
    push: bool = False
    """A task that asks (`metadata.repository.push`) gets its branch pushed to its remote (REPO_PUSH)."""
    push_token_file: str | None = None
    """The file of the token the server's git pushes with over http(s); never shown to a jail."""
    push_username: str | None = None
    """The user name sent with the token (None: `x-access-token`)."""
    push_ssh_key_file: str | None = None
    """The private key the server's ssh pushes with; never shown to a jail."""
    repository: Mapping[str, Any] | None = None
    """The role's default repository, `{"url", "ref"}` (its `repository` in AGENTS): a task naming none
    works on it."""
    role: str | None = None
    """The role these options are for, for errors to name its entry in AGENTS; None: the server-wide
    AGENT_* settings alone (no AGENTS)."""
    worker: str | None = None
    """The remote worker (`a2a-server worker --instance`) these agents run in; None in a server. A run's
    refusal then names the worker and its settings, since the server admitted the task with its own."""

    def __post_init__(self) -> None:
        fix = object.__setattr__
        fix(self, "env_passthrough", tuple(self.env_passthrough))
        fix(self, "sandbox_read", tuple(self.sandbox_read))
        fix(self, "env", dict(self.env))
        if self.repository is not None:
            fix(self, "repository", dict(self.repository))
        if self.sandbox not in ("bwrap", "none"):
            raise self.error("sandbox", f"must be bwrap or none, not {self.sandbox!r}")
        if self.network not in ("host", "egress"):
            raise self.error("network", f"must be host or egress, not {self.network!r}")
        if self.network == "egress" and self.sandbox == "none":
            raise self.error("network", "egress needs the jail (AGENT_SANDBOX=bwrap)")
        try:
            parse_allow(self.egress_allow)
        except ValueError as exc:
            raise self.error("egress_allow", str(exc)) from None
        if not self.idle_timeout_s > 0:
            raise self.error("idle_timeout_s", "must be greater than 0")
        if not self.cancel_grace_s >= 0:
            raise self.error("cancel_grace_s", "must be 0 or more")
        self._check_repositories()

    def _check_repositories(self) -> None:
        try:
            parse_repo_allow(self.repo_allow)
        except ValueError as exc:
            raise self.error("repo_allow", str(exc)) from None
        cache, root = Path(self.repo_cache_root).resolve(), Path(self.workspace_root).resolve()
        if cache == root or root in cache.parents or cache in root.parents:
            raise self.error(
                "repo_cache_root", f"{cache} and AGENT_WORKSPACE_ROOT ({root}) must not hold one another"
            )
        for name in ("repo_max_diff_bytes", "attachment_max_bytes", "attachment_max_total_bytes"):
            if not getattr(self, name) > 0:
                raise self.error(name, "must be greater than 0")
        for name in ("repo_git_timeout_s", "attachment_url_timeout_s"):
            if not getattr(self, name) > 0:
                raise self.error(name, "must be greater than 0")
        try:
            _networks(self.attachment_url_allowed_cidrs)
        except ValueError as exc:
            raise self.error("attachment_url_allowed_cidrs", str(exc)) from None
        self._check_push()
        if self.repository is None:
            return
        if self.repo_path:
            raise self.error(
                "repository", "a repository needs a workspace per context; unset AGENT_REPO_PATH"
            )
        try:
            replace(self.repos, default=None).named({METADATA_KEY: dict(self.repository)})
        except (RepoError, TypeError, ValueError) as exc:
            raise self.error("repository", str(exc)) from None

    def _check_push(self) -> None:
        """Push needs a checkout per context; its credential files must be readable by the server (a
        token file must hold one), and the jail must hide them (`jail.sandbox.check`)."""
        if self.push and self.repo_path:
            raise self.error("push", "pushing needs a checkout per context; unset AGENT_REPO_PATH")
        if self.push_username is not None and not re.fullmatch(
            r"[A-Za-z0-9._@+-]{1,255}", self.push_username
        ):
            raise self.error("push_username", "must be a plain user name (letters, digits, . _ @ + -)")
        try:
            if self.push_token_file:
                if not Path(self.push_token_file).is_absolute():
                    raise RepoError(f"the push token file {self.push_token_file} must be an absolute path")
                read_token(self.push_token_file)
        except RepoError as exc:
            raise self.error("push_token_file", str(exc)) from None
        try:
            if self.push_ssh_key_file:
                check_key_file(self.push_ssh_key_file)
        except RepoError as exc:
            raise self.error("push_ssh_key_file", str(exc)) from None

    @property
    def push_credentials(self) -> Credentials:
        """What the server's own git pushes with (files only it reads)."""
        return Credentials(self.push_token_file, self.push_username or TOKEN_USER, self.push_ssh_key_file)

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> AgentOptions:
        """The server-wide options (every role's unless it sets its own); SettingError for a bad one. Each
        field is its setting in SETTING_OF, but those the settings resolve or parse first."""
        s = settings
        sqlite = s.database_url.split(":///", 1)[-1] if s.database_url.startswith("sqlite") else None
        return from_attributes(
            cls,
            s,
            names={name: setting.lower() for name, setting in SETTING_OF.items()},
            network=s.agent_network_mode,
            env_passthrough=s.agent_passthrough_names,
            sandbox_read=s.agent_sandbox_read_paths,
            database_file=sqlite,
            owner=replica_tag(s.replica_id, s.database_url) if s.replica_id else "",
        )

    def replace(self, **changes: Any) -> AgentOptions:
        """`dataclasses.replace`: a copy with `changes` (e.g. a role's), checked again."""
        return dataclasses.replace(self, **changes)

    @property
    def repos(self) -> RepoPolicy:
        """What repositories and attachments a task may bring (REPO_ALLOW, the role's default, the limits)."""
        default = RepoSource.parse(dict(self.repository)) if self.repository is not None else None
        return RepoPolicy(
            allow=parse_repo_allow(self.repo_allow),
            default=default,
            fixed=self.repo_path,
            push=self.push and not self.repo_path,
            max_attachment_bytes=self.attachment_max_bytes,
            max_attachments_bytes=self.attachment_max_total_bytes,
            urls=UrlPolicy(
                allow_http=True,
                allowed_hosts=frozenset(_split(self.attachment_url_allowed_hosts.lower())),
                allowed_cidrs=_networks(self.attachment_url_allowed_cidrs),
            ),
            url_timeout_s=self.attachment_url_timeout_s,
            private=(self.workspace_root, self.repo_cache_root),
            host="server" if self.worker is None else "worker",
        )

    @property
    def allowed(self) -> tuple[Allowed, ...]:
        """The parsed egress allowlist."""
        return parse_allow(self.egress_allow)

    def where(self, name: str, setting: str | None = None) -> str:
        """How an operator sets field `name`, for a message: `AGENT_SANDBOX_READ`, or for a role
        "the role 'x''s `sandbox_read` in AGENTS (or AGENT_SANDBOX_READ for every role)". `setting` names
        the server-wide setting when the field has none of its own (`bin`: CLAUDE_BIN, ...)."""
        setting = setting or SETTING_OF.get(name, name.upper())
        if self.role is None or name not in ROLE_FIELDS:
            return setting
        return f"the role {self.role!r}'s `{name}` in AGENTS (or {setting} for every role)"

    def error(self, name: str, message: str, setting: str | None = None) -> SettingError:
        """A one-line SettingError about field `name`: named by its setting (`setting` when the field has
        none of its own), or by AGENTS and the role."""
        if self.role is None or name not in ROLE_FIELDS:
            return SettingError(setting or SETTING_OF.get(name, name.upper()), message)
        return SettingError("AGENTS", f"role {self.role!r}, field {name}: {message}")


def _split(value: str) -> list[str]:
    return [item.strip().rstrip(".") for item in value.split(",") if item.strip()]


def _networks(value: str) -> tuple[IPNetwork, ...]:
    """ATTACHMENT_URL_ALLOWED_CIDRS parsed; ValueError naming the first that is not a network."""
    out: list[IPNetwork] = []
    for item in _split(value):
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not a network (e.g. 10.0.0.0/8)") from None
    return tuple(out)
