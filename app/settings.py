"""Settings from the environment (and `.env`), validated once at start-up.

The class lists them in the sections of docs/settings.md, in its order; the checks of their values are
`settings_checks.py`'s. Nothing below the assembly (`main`, `wiring`, `cli`, `admin`, `roles`, `worker`)
reads them: the agents, the edge and the limits get options objects built from them (`from_settings`).
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import settings_checks as checks
from app.agents.errors import SettingError

__all__ = ["SettingError", "Settings", "get_settings"]


class Settings(BaseSettings):
    # An empty variable means "not set" (compose passes `${X:-}` through), never an empty JSON value.
    model_config = SettingsConfigDict(
        env_file=".env", extra="ignore", case_sensitive=False, env_ignore_empty=True
    )

    # ---- Server and protocol ----
    host: str = "127.0.0.1"
    port: int = Field(default=41242, ge=1, le=65535)
    public_url: str = ""
    """What the agent card advertises; unset: http://localhost:$PORT, and a card fetched through another
    loopback origin (http://127.0.0.1:$PORT, a local proxy) advertises that origin (`follows_host`)."""
    grpc_port: int = Field(default=50051, ge=0, le=65535)
    """The gRPC binding's port (both versions on one port); 0: no gRPC."""
    grpc_host: str = ""
    """The gRPC bind address; defaults to HOST."""
    grpc_public_address: str = ""
    """The `host:port` the card advertises for gRPC; defaults to PUBLIC_URL's host with GRPC_PORT."""
    _follows_host: bool = PrivateAttr(default=False)
    _grpc_follows_host: bool = PrivateAttr(default=False)
    send_stream_until: Literal["interrupted", "terminal"] = "interrupted"
    """Where a send's stream (`message/stream`, `SendStreamingMessage`, REST `:stream`, gRPC) ends:
    `interrupted`, at the end of the turn (a terminal state, or input-required / auth-required, v0.3's
    `final: true`), which every client and agent framework handles; `terminal`, only when the task ends.
    A subscriber (`tasks/resubscribe`, `SubscribeToTask`) always follows the task to its end."""
    blocking_timeout_s: float = Field(default=600.0, gt=0)
    """Longest a blocking `message/send` waits; then it returns the task as it stands."""
    idempotency_ttl_s: float = Field(default=86400.0, gt=0)
    """How long a send's `Idempotency-Key` is kept: the same key and request get the same task till then."""
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    """Interval of SSE keep-alive comments on idle streams."""
    card_max_age_s: int = Field(default=300, ge=0)
    card_compat: Literal["hybrid", "1.0"] = "hybrid"
    """The card served without `A2A-Version`: `hybrid` (v1.0 fields plus the v0.3 ones v0.3 clients need)
    or `1.0` (v1.0 fields only, for deployments with no v0.3 clients). `A2A-Version: 1.0` always gets 1.0."""
    card_extensions: list[dict[str, Any]] = Field(default_factory=list)
    """JSON list of A2A extensions every card declares (`capabilities.extensions`), each
    `{"uri", "description", "required", "params"}`; the agent's own (`Agent.extensions`) are added, these
    win for the same URI. A request that does not name a `required` one in `A2A-Extensions` is refused."""
    card_signing_key_file: str = ""
    """Sign every card (JWS, `signatures`): a private key file, PEM or JWK (EC P-256: ES256, RSA: RS256,
    Ed25519: EdDSA). Two comma-separated files during a key rotation: the card carries a signature by each."""
    card_signing_kid: str = ""
    """The `kid` of each key of CARD_SIGNING_KEY_FILE, comma-separated in the same order (a JWK file's own
    `kid` when unset)."""
    card_signing_jku: str = ""
    """Optional: the URL of the JWKS with the public keys, put in each signature's protected header."""
    card_provider_organization: str = ""
    """The card's `provider.organization`: who runs the agent (with CARD_PROVIDER_URL, both or neither)."""
    card_provider_url: str = Field(default="", validate_default=True)
    """The card's `provider.url` (with CARD_PROVIDER_ORGANIZATION)."""
    card_documentation_url: str = ""
    """The card's `documentationUrl`: where people read about the agent."""
    card_icon_url: str = ""
    """The card's `iconUrl`: an icon clients may show for the agent."""
    log_level: str = "info"
    log_format: Literal["auto", "text", "json"] = "auto"
    """`json`: one JSON object per line (time, level, logger, message, replica, and the task, context, role,
    hashed principal and trace ids where known); `text`: a line for people; `auto`: text on a terminal, JSON
    otherwise (docs/operations.md "Logs")."""
    otel_exporter_otlp_endpoint: str = ""
    """Turns tracing on: spans go over OTLP/HTTP (protobuf) to `<this>/v1/traces` (docs/operations.md
    "Traces"). Unset: no tracing, at no cost. The SDK's other `OTEL_*` variables apply as usual."""
    otel_exporter_otlp_traces_endpoint: str = ""
    """The full traces URL when it is not `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`; turns tracing on too."""
    otel_service_name: str = ""
    """The `service.name` of the spans (default `a2a-coding-server`)."""
    otel_sdk_disabled: bool = False
    """True: no tracing even with an endpoint set."""
    metrics_enabled: bool = True
    """Serve Prometheus metrics at `/metrics` (no credential, like `/healthz`: restrict it at the proxy)."""
    price_table_file: str = ""
    """A JSON file of model prices (USD per million tokens: `{"model": {"input", "output", "cacheRead",
    "cacheWrite"}}`) merged over the built-in table (`app/runner/prices.py`): what a run costs when its agent
    reports tokens but no cost (docs/operations.md "Usage and cost"). Read at start-up."""
    console_admins: str = ""
    """Comma-separated principals who may look at every principal's data where the server offers it: the
    usage of another principal (`GET /usage?owner=X`) or of all (`owner=*`), and every principal's tasks in
    the web console and its read API (watch only). Everyone else sees their own only."""

    # ---- Database and scaling out ----
    database_url: str = "sqlite+aiosqlite:///./data/a2a.db"
    redis_url: str | None = None
    """Unset: the in-process bus (single node)."""
    replica_id: str = ""
    """This process's name in leases and control messages; defaults to hostname:port, stable across
    restarts so a restarted replica recovers its own tasks at once. With `WORKERS` above 1 each worker
    process is `<this>/<pid>`."""
    workers: int = Field(default=1, ge=1, le=64)
    """Server processes on the one port (uvicorn's workers), for machines with more cores. Each is a replica
    of its own, sharing the database and the Redis bus as replicas do, so more than one needs `REDIS_URL`
    and PostgreSQL (docs/operations.md "Workers")."""
    lease_ttl_s: float = Field(default=15.0, gt=0)
    """How long a replica's claim on a task lasts without a heartbeat; a dead replica's tasks are ended or
    re-queued by another replica about twice this after it died (a reaper marks the expired lease, then
    gives the holder one more TTL to renew: `store/leases.py`)."""
    checkpoint_s: float = Field(default=120.0, gt=0)
    """How often a running coding CLI's workspace and session are saved as its task's checkpoint (also at
    each end of a turn and at a clean shutdown), so another holder can go on when this one dies."""
    checkpoint_max_mb: float = Field(default=64.0, gt=0)
    """The largest checkpoint kept (compressed); a larger one is not saved, and the task cannot resume."""
    resume_attempts: int = Field(default=2, ge=0)
    """How many times a task whose holder died (or shut down) goes on elsewhere from its checkpoint
    before it fails as lost; 0: never."""
    db_outage_grace_s: float = Field(default=120.0, gt=0)
    """How long a run keeps its unrecorded events in memory while the database is unreachable (its agent
    paused when the buffer is full); past it the agent is stopped and the task ends `failed` once the
    database is back."""
    db_timeout_s: float = Field(default=10.0, gt=0)
    """Longest a call waits to connect to the database or for a pooled connection; then it fails."""
    db_statement_timeout_s: float = Field(default=30.0, gt=0)
    """Longest one database statement may take (PostgreSQL) before it fails."""
    queue_poll_s: float = Field(default=2.0, gt=0)
    """Fallback interval for looking for queued tasks and expired leases when no doorbell rings."""
    discovery_heartbeat_s: float = Field(default=45.0, gt=0)
    """How often a process refreshes its instances (one per role it runs) in discovery (`GET /agents`)."""
    discovery_max_age_s: float = Field(default=120.0, gt=0)
    """An instance not refreshed for this long is no longer listed (a process that died without saying
    so); above DISCOVERY_HEARTBEAT_S. Rows ten times older are deleted."""
    role_wait_s: float = Field(default=30.0, ge=0)
    """How long a task sent to a role with no live instance waits for one before it fails, saying so."""

    # ---- Retention ----
    task_retention_days: float = Field(default=30.0, ge=0)
    """Tasks that ended (their last status) more than this many days ago are deleted with their history,
    artifacts, events, webhooks, outbox rows and Idempotency-Keys (usage rows are kept); 0: kept for good."""
    input_required_ttl_s: float = Field(default=86400.0, ge=0)
    """A task left waiting for input or auth this long is canceled, with the reason in its status message
    (its waiting run stopped); 0: tasks wait for good."""
    retention_interval_s: float = Field(default=600.0, gt=0)
    """How often a replica runs the retention pass (one replica at a time; the first a minute after
    start-up, or this interval if shorter)."""
    retention_batch: int = Field(default=500, ge=1)
    """Most tasks one retention transaction deletes (fewer when they have many events)."""

    # ---- Agents ----
    agent_adapter: str = "echo"
    """A built-in adapter name (`echo`, `scripted`, or a coding-agent CLI: `claude-code`, `codex`,
    `gemini`, `cursor`, `ndjson`), or `module:attr` naming a user's Agent class, factory or instance."""
    agent_options: dict[str, Any] = Field(default_factory=dict)
    """JSON object passed to the agent's class or factory as keyword arguments."""
    agents: dict[str, Any] = Field(default_factory=dict)
    """Teams of agents: JSON object, role name → `{adapter, options, bin, model, env, ...}` (app/roles.py,
    docs/teams.md). Unset: AGENT_ADAPTER is the one role, `default`."""
    agents_file: str = ""
    """The same as a YAML or JSON file."""
    agent_roles: str = ""
    """Comma-separated roles this process runs agents for (default: every configured role). Every process
    accepts calls and serves streams for every role."""
    agent_timeout_s: float = Field(default=3600.0, gt=0)
    """Longest an agent run may take before its task fails with a timeout."""
    cancel_grace_s: float = Field(default=5.0, ge=0)
    """How long a cancelled agent gets after SIGTERM before SIGKILL."""
    agent_repo_path: str | None = None
    """Where CLI agents work. Unset: a workspace per context under `agent_workspace_root`."""
    agent_workspace_root: str = "./data/workspaces"
    """Parent of the workspaces (`<root>/<principal hash>/<contextId>`) and of each principal's CLI HOME
    (`<root>/<principal hash>/.home`); a later turn of a context reuses its folder."""
    agent_sandbox: Literal["bwrap", "none"] = "bwrap"
    """`bwrap`: each CLI runs in a bubblewrap jail (docs/agents.md "Security of coding agents"); `none`:
    on the host as the server's user (still with the allowlisted environment). Start-up fails if bwrap
    cannot run."""
    agent_network: Literal["host", "egress"] | None = None
    """`egress` (the default with the jail): the CLI reaches only AGENT_EGRESS_ALLOW through a proxy;
    `host`: the host's network as it is (the default without the jail)."""
    agent_egress_allow: str = ""
    """Comma-separated `host[:port]` (or `*.domain[:port]`) the CLI may connect to with `egress`; a host
    without a port allows 443 and 80. Private and loopback addresses only when named exactly."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """JSON object of variables every CLI gets (e.g. its model API key)."""
    agent_env_passthrough: str = ""
    """Comma-separated names of the server's variables copied into every CLI's environment."""
    agent_sandbox_read: str = ""
    """Comma-separated extra paths the jailed CLI may read (e.g. an `ndjson` agent's script)."""
    agent_home_seed: str | None = None
    """A folder copied into each principal's new CLI HOME (e.g. `.codex/config.toml`)."""
    agent_idle_timeout_s: float = Field(default=900.0, gt=0)
    """A CLI that prints nothing on stdout this long fails its task (a long tool run prints nothing,
    so keep it above the longest command you expect)."""
    agent_force: bool = True
    """True: the CLI runs unattended (skips its permission prompts). False: approvals round-trip
    through input-required where the CLI has a channel for them."""
    agent_model: str | None = None
    """Passed to the CLI as its model (`--model`); unset: the CLI's default."""
    agent_models: str = ""
    """Comma-separated models a task may choose instead (`metadata.model`); AGENT_MODEL is always one of
    them. Empty: a task runs on AGENT_MODEL and may name no other."""
    agent_command: str | None = None
    """The `ndjson` adapter's command line (shell-like quoting), e.g. `/usr/bin/python3 /srv/my_agent.py`
    (it starts in the task's workspace)."""
    repo_allow: str = ""
    """Comma-separated URL prefixes (`https://github.com/my-org/`) and local folders (absolute paths or
    `file://`) a task's repository (`metadata.repository`, or a role's `repository`) may come from; empty:
    no repository is taken (docs/agents.md "Working on your repository")."""
    repo_cache_root: str = "./data/repos"
    """The mirrors of the repositories tasks name, one per repository, fetched for each new checkout; never
    inside AGENT_WORKSPACE_ROOT, never shown to a jail."""
    repo_max_diff_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Longest diff an artifact shows; a longer one is cut with a note and the whole patch is a second one."""
    repo_git_timeout_s: float = Field(default=600.0, gt=0)
    """Longest one of the server's git commands may take (a clone, a fetch, a turn's diff)."""
    repo_push: bool = False
    """Every CLI role may push a task's branch to its repository's remote when the task asks
    (`metadata.repository.push`); a role's `push` in AGENTS decides for that role."""
    repo_push_token_file: str | None = None
    """A file holding the token the server's own git pushes with over https (never shown to an agent)."""
    repo_push_username: str | None = None
    """The user name sent with that token (default `x-access-token`)."""
    repo_push_ssh_key_file: str | None = None
    """A private key file the server's own ssh pushes with to an ssh remote (never shown to an agent)."""
    attachment_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    """Largest file part (inline bytes, or fetched from its URL) a coding agent's message may carry; written
    under attachments/."""
    attachment_max_total_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    """The most bytes all the file parts of one message may carry together."""
    attachment_url_allowed_hosts: str = ""
    """Comma-separated hosts a file part's URL may name whatever they resolve to (no address check); others
    must resolve to public addresses only (the webhooks' SSRF guard)."""
    attachment_url_allowed_cidrs: str = ""
    """Comma-separated networks a file part's URL may resolve into even when private (e.g. 10.0.0.0/8)."""
    attachment_url_timeout_s: float = Field(default=30.0, gt=0)
    """Longest the server's fetch of one file part by URL may take, its redirects included."""
    claude_bin: str = "claude"
    cursor_bin: str = "cursor-agent"
    codex_bin: str = "codex"
    gemini_bin: str = "gemini"
    max_concurrent_tasks: int = Field(default=64, ge=1)
    """Agents this process runs at once; further tasks wait `submitted`."""
    agent_call_depth: int = Field(default=3, ge=0)
    """How many calls deep agents may hand work to agents (`send_to_agent`): a task a client started is at
    depth 0, a task its run started at 1, ...; a call that would go deeper is refused. 0: no calls."""
    agent_call_wait_s: float = Field(default=600.0, gt=0)
    """Longest a run's `send_to_agent` or `answer_task` waits for the task it started to end or ask; past
    it the task comes back `working`, for the run to poll with `get_task`."""
    worker_call_hold_s: float = Field(default=25.0, gt=0)
    """Longest the server holds one call of a remote worker's run that waits for a child (below the read
    timeouts of proxies between them); the worker asks again until the child ends or asks."""

    # ---- Push notifications ----
    push_notification_allow_http: bool = False
    """Allow plain-http webhook URLs (https only otherwise)."""
    push_notification_allowed_hosts: str = ""
    """Comma-separated webhook host names trusted as they are: no DNS check, no address check."""
    push_notification_allowed_cidrs: str = ""
    """Comma-separated networks webhook addresses may be in even when private (e.g. 10.0.0.0/8)."""
    # push_<option>: the delivery worker's `Options` of the same name (push/deliverer.py `options_from`).
    push_max_attempts: int = Field(default=8, ge=1)
    """Attempts per notification before it is given up (recorded as failed)."""
    push_backoff_s: float = Field(default=1.0, gt=0)
    """First retry delay; doubled per attempt, with jitter, up to `push_backoff_max_s`."""
    push_backoff_max_s: float = Field(default=300.0, gt=0)
    push_timeout_s: float = Field(default=10.0, gt=0)
    """Longest one webhook call may take (connect and answer)."""
    push_claim_ttl_s: float = Field(default=30.0, gt=0)
    """How long a replica's claim on a webhook's queue lasts without renewal; a dead replica's
    deliveries are taken over by another replica within this time."""
    push_poll_s: float = Field(default=1.0, gt=0)
    """Interval of looking for due deliveries (retries, other replicas' work) when no doorbell rings."""
    push_max_in_flight: int = Field(default=64, ge=1)
    """Webhooks this process calls at once (each one in order, one call at a time); a webhook whose last
    calls are being recorded leaves its place to another meanwhile."""
    push_deliver: bool = True
    """Run the delivery worker here. Off: this replica only queues notifications and others deliver them
    (a write-only replica, or a benchmark building a backlog to time one replica's delivery alone)."""

    # ---- Authentication ----
    auth_mode: Literal["required", "off"] = "required"
    """`required`: every route but the card and health needs a credential; `off`: all callers are one
    anonymous principal (only when set explicitly; `make run` sets it on loopback)."""
    api_keys: dict[str, str] = Field(default_factory=dict)
    """JSON object: sha256 hex of an API key (`a2a-server hash-key`) → principal name."""
    worker_keys: dict[str, str] = Field(default_factory=dict)
    """JSON object: sha256 hex of a remote worker's key → the worker's name. Such a key admits only the worker
    endpoints (`/workers/v1/...`), and only it does (docs/teams.md)."""
    worker_jwt_scope: str = "a2a:worker"
    """A JWT carrying this scope is a worker credential (and nothing else)."""
    jwt_jwks_url: str = ""
    """JWKS of the issuer whose bearer JWTs are accepted; enables JWT authentication."""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_required_scopes: str = ""
    """Space- or comma-separated scopes every JWT must carry (`scope` or `scp` claim)."""
    jwt_algorithms: str = "RS256,ES256"
    jwt_principal_claim: str = "sub"
    jwt_leeway_s: float = Field(default=30.0, ge=0)
    jwks_cache_s: float = Field(default=300.0, gt=0)
    """How long fetched keys are trusted before the JWKS is read again."""
    jwks_refresh_min_s: float = Field(default=10.0, ge=0)
    """An unknown `kid` re-reads the JWKS at most this often (a flood of made-up kids costs one fetch)."""
    oidc_discovery_url: str = ""
    """Advertised in the card's openIdConnect scheme when set (else the JWT scheme is `http` bearer)."""
    extended_card_skills: list[dict[str, Any]] = Field(default_factory=list)
    """JSON list of extra skills for the authenticated extended card."""
    extended_card_file: str = ""
    """A JSON file holding such a list (or `{"skills": [...]}`); read at start-up."""
    cors_origins: str = ""
    """Comma-separated origins that may call the API from a browser (`*`: any); the card is always `*`."""

    # ---- Limits ----
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    max_message_parts: int = Field(default=64, ge=1)
    max_message_text_chars: int = Field(default=1_000_000, ge=1)
    """Total characters of the text parts of one message."""
    max_history_length: int = Field(default=1000, ge=0)
    """Most history messages a task read returns, whatever `historyLength` asks for."""
    task_rate_per_min: float = Field(default=120.0, ge=0)
    """New tasks one principal may create per minute (0: unlimited); across all replicas with Redis."""
    task_rate_burst: int = Field(default=30, ge=1)
    max_streams_per_principal: int = Field(default=100, ge=0)
    """Open SSE streams one principal may hold (0: unlimited); across all replicas with Redis."""
    stream_slot_ttl_s: float = Field(default=30.0, gt=0)
    """With Redis: a replica refreshes its open streams' entries every TTL/3, so a crashed replica's
    streams stop counting against the cap within this time."""
    budget_task_usd: float | None = Field(default=None, gt=0)
    """The most one task may spend, in US dollars (a role's `budget_usd` overrides it; unset: no cap)."""
    budget_day_usd: float | None = Field(default=None, gt=0)
    """The most one principal may spend in a UTC day, in US dollars (unset: no cap); a send past it is 429."""

    # ---- Checks (app/settings_checks.py), each applied to the settings it names ----
    _blank_is_unset = field_validator(
        "agent_repo_path",
        "agent_model",
        "agent_command",
        "agent_home_seed",
        "repo_push_token_file",
        "repo_push_username",
        "repo_push_ssh_key_file",
    )(checks.blank_is_unset)
    _no_budget = field_validator("budget_task_usd", "budget_day_usd", mode="before")(checks.blank_is_unset)
    _known_driver = field_validator("database_url")(checks.database_url)
    _redis_scheme = field_validator("redis_url")(checks.redis_url)
    _http_url = field_validator("public_url")(checks.public_url)
    _log_format = field_validator("log_format", mode="before")(checks.lower)
    _otlp_url = field_validator("otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint")(
        checks.otlp_url
    )
    _workers = field_validator("workers")(checks.workers)
    _level = field_validator("log_level")(checks.log_level)
    _cidrs = field_validator("push_notification_allowed_cidrs", "attachment_url_allowed_cidrs")(checks.cidrs)
    _repo_allow = field_validator("repo_allow")(checks.repo_allow)
    _lower = field_validator("agent_sandbox", "agent_network", mode="before")(checks.lower)
    _egress_needs_the_jail = field_validator("agent_network")(checks.egress_needs_the_jail)
    _outlives_the_heartbeat = field_validator("discovery_max_age_s")(checks.outlives_the_heartbeat)
    _auth_mode = field_validator("auth_mode", mode="before")(checks.auth_mode)
    _hashed_keys = field_validator("api_keys", "worker_keys")(checks.hashed_keys)
    _extensions = field_validator("card_extensions")(checks.card_extensions)
    _optional_http_url = field_validator(
        "jwt_jwks_url",
        "oidc_discovery_url",
        "card_signing_jku",
        "card_provider_url",
        "card_documentation_url",
        "card_icon_url",
    )(checks.optional_http_url)
    _provider = field_validator("card_provider_url")(checks.provider_pair)

    @property
    def agent_network_mode(self) -> Literal["host", "egress"]:
        """The network a CLI gets: AGENT_NETWORK, or egress inside the jail and host without it."""
        return self.agent_network or ("egress" if self.agent_sandbox == "bwrap" else "host")

    @property
    def agent_passthrough_names(self) -> list[str]:
        return checks.split(self.agent_env_passthrough)

    @property
    def agent_sandbox_read_paths(self) -> list[str]:
        return checks.split(self.agent_sandbox_read)

    @property
    def push_allowed_hosts(self) -> frozenset[str]:
        return frozenset(h.lower() for h in checks.split(self.push_notification_allowed_hosts))

    @property
    def push_allowed_cidrs(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(
            ipaddress.ip_network(c, strict=False) for c in checks.split(self.push_notification_allowed_cidrs)
        )

    @property
    def console_admin_set(self) -> frozenset[str]:
        """CONSOLE_ADMINS as a set of principal names."""
        return frozenset(checks.split(self.console_admins))

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip()]

    @property
    def follows_host(self) -> bool:
        """No PUBLIC_URL was given: the card advertises the loopback origin it was fetched through."""
        return self._follows_host

    @property
    def grpc_follows_host(self) -> bool:
        """No GRPC_PUBLIC_ADDRESS was given: the card's gRPC host is its HTTP URL's."""
        return self._grpc_follows_host

    @model_validator(mode="after")
    def _default_public_url(self) -> Settings:
        self._follows_host = not self.public_url
        self._grpc_follows_host = not self.grpc_public_address
        if not self.public_url:
            self.public_url = f"http://localhost:{self.port}"
        if not self.grpc_host:
            self.grpc_host = self.host
        if not self.grpc_public_address and self.grpc_port:
            host = urlsplit(self.public_url).hostname or "localhost"
            host = f"[{host}]" if ":" in host else host
            self.grpc_public_address = f"{host}:{self.grpc_port}"
        if not self.replica_id:
            self.replica_id = f"{socket.gethostname()}:{self.port}"
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
