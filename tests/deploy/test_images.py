"""The `agents` image and the compose profile `team`: the Dockerfile installs the CLIs that
scripts/install-clis.sh pins and runs them as a user of its own; the team's services parse, start only with
the profile, use images the Dockerfile builds, carry no secret, and are served by nginx's team server (tried
here with a real nginx). No Docker engine is needed: the files are read, and compose parses them if there."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from app import roles
from app.settings import Settings
from scripts.nginx_conf import COMPOSE_TEAM, TeamProxy, nginx_binary, nginx_command, write_local

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
INSTALL_CLIS = ROOT / "scripts" / "install-clis.sh"
COMPOSE = ROOT / "docker-compose.yml"
TEAM = {"team-db", "team-migrate", "reviewers", "implementers", "triage-worker"}
POOLS = {"reviewers": "reviewer", "implementers": "implementer"}
WORKER = "triage-worker"


# ---- the Dockerfile, read as docker reads it ----


@dataclass
class Stage:
    name: str | None
    base: str
    args: dict[str, str] = field(default_factory=dict)
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def index(self, keyword: str, contains: str) -> int:
        return next(i for i, (kw, rest) in enumerate(self.instructions) if kw == keyword and contains in rest)

    def expand(self, text: str) -> str:
        """`$X` / `${X}` replaced by the ARG defaults in force."""
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.args.get(m[1], m[0]), text)

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for rest in self.all("ENV"):
            for word in shlex.split(rest):
                name, _, value = word.partition("=")
                out[name] = value
        return out


def _dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """The global ARGs and the stages, continuation lines joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    assert not current, "a continuation line ends the Dockerfile"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, line
            stages.append(Stage(name=m[2], base=m[1]))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM: {line}"
            name, _, default = rest.partition("=")
            global_args[name] = default
        else:
            stage = stages[-1]
            if keyword == "ARG":
                name, _, default = rest.partition("=")
                stage.args[name] = default or global_args.get(name, "")
            stage.instructions.append((keyword, rest))
    return global_args, stages


def _stage(stages: list[Stage], name: str) -> Stage:
    found = [s for s in stages if s.name == name]
    assert len(found) == 1, f"the Dockerfile has {len(found)} stages named {name!r}"
    return found[0]


def _pins() -> dict[str, str]:
    """scripts/install-clis.sh's PACKAGES: package name -> version."""
    block = re.search(r"^PACKAGES=\(\n(.*?)^\)", INSTALL_CLIS.read_text(), re.M | re.S)
    assert block, "scripts/install-clis.sh declares no PACKAGES=( ... )"
    specs = re.findall(r'"([^"]+)"', block[1])
    return {spec.rpartition("@")[0]: spec.rpartition("@")[2] for spec in specs}


def _script_bins() -> list[str]:
    """The CLIs scripts/install-clis.sh checks (`.../node_modules/.bin/NAME --version`)."""
    return re.findall(r'node_modules/\.bin/([\w-]+)" --version', INSTALL_CLIS.read_text())


def test_the_agents_image_installs_exactly_the_clis_install_clis_sh_pins():
    pins = _pins()
    assert set(pins) == {"@anthropic-ai/claude-code", "@openai/codex", "@google/gemini-cli"}
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in pins.values()), pins
    global_args, stages = _dockerfile()
    text = DOCKERFILE.read_text()
    # One place names the versions: the script, run by the Dockerfile. No second pin can drift from it.
    for name in pins:
        assert f"{name}@" not in text, f"the Dockerfile pins {name} itself: let scripts/install-clis.sh do it"
    assert "npm install" not in text and "npm i " not in text
    clis = _stage(stages, "clis")
    assert clis.base == "node:${NODE_VERSION}-bookworm-slim", clis.base
    assert int(global_args["NODE_VERSION"]) >= 20, "gemini-cli needs Node.js 20+"
    assert any(rest.split()[0] == "scripts/install-clis.sh" for rest in clis.all("COPY"))
    run = next(rest for rest in clis.all("RUN") if "install-clis.sh" in rest)
    cli_dir = re.search(r"CLI_CACHE_DIR=(\S+)", run)[1]

    agents = _stage(stages, "agents")
    copies = [rest.split() for rest in agents.all("COPY") if rest.startswith("--from=clis ")]
    assert [cli_dir, cli_dir] in [words[1:] for words in copies], copies
    assert ["/usr/local/bin/node", "/usr/local/bin/node"] in [words[1:] for words in copies]
    assert agents.env()["PATH"].startswith(f"{cli_dir}/node_modules/.bin:"), "the CLIs are not on PATH"
    # The image proves every CLI the script installs starts in it, as its user.
    bins = _script_bins()
    assert sorted(bins) == ["claude", "codex", "gemini"]
    check = agents.index("RUN", "--version")
    assert check > agents.index("USER", "")
    for name in ["node", *bins]:
        assert f"{name} --version" in agents.instructions[check][1], name


def test_the_agents_target_runs_as_a_user_of_its_own_with_a_workspace_volume():
    _, stages = _dockerfile()
    base, agents, default = _stage(stages, "base"), _stage(stages, "agents"), stages[-1]
    assert base.base == "python:3.11-slim"
    assert agents.base == "base", "the agents image is the server plus the CLIs"
    assert "bubblewrap" in " ".join(base.all("RUN")), "the jail is in every image"
    # Not root, by number (Kubernetes' runAsNonRoot can only check a number), and the user the image creates.
    user = agents.expand(agents.all("USER")[-1])
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and gid.isdigit(), user
    useradd = next(rest for rest in agents.all("RUN") if "useradd" in rest)
    assert re.search(r"--uid\s+(\S+)", agents.expand(useradd))[1].strip('"') == uid
    # The workspaces in a volume the user owns: created and chowned before VOLUME, which keeps the owner.
    workspace = agents.env()["AGENT_WORKSPACE_ROOT"]
    volumes = agents.all("VOLUME")
    assert len(volumes) == 1 and orjson.loads(volumes[0]) == [workspace]
    chown = agents.index("RUN", "chown")
    assert workspace in agents.instructions[chown][1]
    assert chown < agents.index("VOLUME", workspace)
    # The default target (`docker build .`, compose's `build: .`) is the server as before: the last stage.
    assert default.name == "server" and default.base == "base" and not default.instructions
    assert base.all("CMD") == ['["a2a-server", "serve"]'] and not base.all("USER")
    assert [s.name for s in stages].index("agents") < len(stages) - 1


# ---- docker-compose.yml ----


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _interpolate(value: object) -> str:
    """A compose value as compose gives it with none of its variables set: `${X:-default}` is the default."""
    return re.sub(r"\$\{\w+(?::?-([^}]*))?\}", lambda m: m[1] or "", str(value))


def _settings(env: dict, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a service's environment gives the server (as compose passes it, no variable set)."""
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, _interpolate(value))
    return Settings(_env_file=None)


def test_the_team_profile_two_pools_and_a_worker(monkeypatch: pytest.MonkeyPatch):
    services = _compose()["services"]
    assert TEAM <= set(services)
    # Only `--profile team` starts them; `docker compose up` starts what it always did (and `--profile
    # monitoring` Prometheus and Grafana, tests/deploy/test_monitoring.py).
    monitoring = {"prometheus", "grafana"}
    for name, svc in services.items():
        profiles = ["team"] if name in TEAM else ["monitoring"] if name in monitoring else None
        assert svc.get("profiles") == profiles, name

    agents = {services[n]["environment"]["AGENTS"] for n in [*POOLS, WORKER]}
    assert len(agents) == 1, "every process of the team must have the same AGENTS"
    default_db = _settings(services["a2a-1"]["environment"], monkeypatch).database_url
    worker_role = services[WORKER]["command"][services[WORKER]["command"].index("--role") + 1]
    running = set()
    for name, role in POOLS.items():
        svc = services[name]
        env = svc["environment"]
        settings = _settings(env, monkeypatch)
        loaded = roles.load(settings)
        assert [r.name for r in loaded.values() if r.runs_here] == [role]
        running.add(role)
        # The same PostgreSQL and Redis services as the default deployment, a database of its own.
        assert settings.database_url.startswith("postgresql+asyncpg://a2a:a2a@postgres:5432/")
        assert settings.database_url != default_db
        assert settings.redis_url.startswith("redis://redis:6379/")
        assert settings.redis_url != _settings(services["a2a-1"]["environment"], monkeypatch).redis_url
        # The address clients use is nginx's team server; the workers' keys come from the environment.
        assert settings.public_url.endswith(f":{COMPOSE_TEAM.listen}")
        assert settings.grpc_public_address.endswith(f":{COMPOSE_TEAM.grpc_listen}")
        assert env["WORKER_KEYS"] == "${WORKER_KEYS:-}"
        # The model key of the role it runs, from the environment, handed to that role's CLI by name.
        entry = loaded[role].entry
        (key,) = entry.env_passthrough
        assert env[key] == f"${{{key}:-}}"
        assert svc["build"] == {"context": ".", "target": "agents"}
        assert svc["networks"]["default"]["aliases"] == [COMPOSE_TEAM.host], "nginx finds replicas by it"
        assert svc["volumes"] == ["team-workspaces:/workspace"]
        assert svc["deploy"]["replicas"] >= 2
        assert "/readyz" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["team-migrate"]["condition"] == "service_completed_successfully"
        assert "ports" not in svc, "replicas are reached through nginx only"
    adapters = {r.name: r.entry.adapter for r in roles.load(settings).values()}
    assert adapters == {"reviewer": "claude-code", "implementer": "codex", "triager": "gemini"}
    assert worker_role in adapters and worker_role not in running, "the worker's role runs on no replica"
    # The team's database is created and migrated before its replicas start.
    migrate = services["team-migrate"]
    assert migrate["environment"]["DATABASE_URL"] == services["reviewers"]["environment"]["DATABASE_URL"]
    assert migrate["command"] == ["a2a-server", "migrate"]
    assert "CREATE DATABASE " + settings.database_url.rsplit("/", 1)[1] in services["team-db"]["command"][-1]
    # nginx, the same service as the default deployment's, publishes the team's ports.
    ports = [str(p) for p in services["nginx"]["ports"]]
    for listen in (COMPOSE_TEAM.listen, COMPOSE_TEAM.grpc_listen):
        assert f"{listen}:{listen}" in ports


def test_the_worker_connects_out_through_nginx_with_a_worker_key_only(monkeypatch: pytest.MonkeyPatch):
    worker = _compose()["services"][WORKER]
    command = worker["command"]
    assert command[:2] == ["a2a-server", "worker"]
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,39}", command[command.index("--role") + 1])
    assert command[command.index("--server") + 1] == f"http://nginx:{COMPOSE_TEAM.listen}"
    env = worker["environment"]
    assert env["A2A_WORKER_KEY"] == "${A2A_WORKER_KEY:-}"
    # No way into the database, Redis or the API as a client: only the worker credential.
    assert not {"DATABASE_URL", "REDIS_URL", "API_KEYS", "WORKER_KEYS", "JWT_JWKS_URL"} & set(env)
    settings = _settings(env, monkeypatch)
    loaded = roles.load(settings)
    role = loaded[command[command.index("--role") + 1]]
    assert [r.name for r in loaded.values() if r.runs_here] == [role.name]
    (key,) = role.entry.env_passthrough
    assert env[key] == f"${{{key}:-}}"
    assert worker["build"] == {"context": ".", "target": "agents"}
    assert worker["depends_on"]["nginx"]["condition"] == "service_healthy"


def test_every_service_uses_an_image_the_dockerfile_builds_or_a_pinned_one():
    _, stages = _dockerfile()
    names = {s.name for s in stages}
    services = _compose()["services"]
    built: dict[str, str] = {}  # image tag -> the Dockerfile target it is built from
    for name, svc in services.items():
        if "build" not in svc:
            continue
        build = svc["build"] if isinstance(svc["build"], dict) else {"context": svc["build"]}
        assert build["context"] == "." and "dockerfile" not in build, name
        target = build.get("target", stages[-1].name)
        assert target in names, f"{name} builds target {target!r}, not in the Dockerfile"
        assert built.setdefault(svc["image"], target) == target, f"{svc['image']} is built from two targets"
    assert built == {"a2a-coding-server:local": "server", "a2a-coding-server:agents": "agents"}
    for name, svc in services.items():
        if "build" not in svc:
            image = svc["image"]
            assert image not in built and re.fullmatch(r"[\w./-]+:[\w.-]+", image), name
            assert not image.endswith(":latest"), name


def test_no_secret_is_written_in_the_compose_file():
    text = COMPOSE.read_text()
    services = _compose()["services"]
    database_password = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    for name, svc in services.items():
        for var, value in (svc.get("environment") or {}).items():
            value = str(value)
            if re.search(r"KEY|TOKEN|SECRET|CREDENTIAL", var):
                # Only passed through from the environment, empty when unset.
                assert value == f"${{{var}:-}}", f"{name}: {var} must be ${{{var}:-}}, not a value"
            elif "PASSWORD" in var:
                # The one written credential: the unpublished database's, which the default deployment has.
                assert value == database_password, f"{name}: {var}"
            for password in re.findall(r"://[^:/@]+:([^@]+)@", value):
                assert password == database_password, f"{name}: {var}"
    # Nothing that looks like a model key, a JWT, or a key digest anywhere (comments included).
    for pattern in (
        r"sk-[A-Za-z0-9_-]{8,}",
        r"AIza[0-9A-Za-z_-]{20,}",
        r"eyJ[\w-]{10,}",
        r"\b[0-9a-f]{40,}\b",
    ):
        assert not re.search(pattern, text), pattern


def test_the_compose_file_validates_with_compose_itself():
    """`docker compose config` (or the older docker-compose) where it is installed: the schema, anchors,
    merges and the profile as compose reads them."""
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and subprocess.run([*cmd, "version"], capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("docker compose is not installed")
    for profile in ([], ["--profile", "team"], ["--profile", "monitoring"]):
        done = subprocess.run(
            [*cmd, "-f", str(COMPOSE), *profile, "config", "-q"], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr


# ---- nginx's team server ----


def test_the_team_server_is_as_sse_safe_as_the_default_one():
    from scripts.nginx_conf import render_compose

    text = render_compose()
    team = text[text.index("listen 8081;") :]
    team = team[: team.index("\n    }\n")]
    for directive in (
        "proxy_buffering off;",
        "proxy_cache off;",
        "proxy_read_timeout 1h;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_set_header Last-Event-ID $http_last_event_id;",
        "proxy_next_upstream error timeout http_502;",
        f"set $a2a_team {COMPOSE_TEAM.host};",
        f"proxy_pass http://$a2a_team:{COMPOSE_TEAM.port};",
    ):
        assert directive in team, directive
    directives = "\n".join(line.split("#", 1)[0] for line in team.splitlines())
    assert "non_idempotent" not in directives, "a POST must never be retried after it reached a replica"
    assert f"resolver {COMPOSE_TEAM.resolver} valid=5s" in text, "Docker's DNS, re-read often"
    assert f"listen {COMPOSE_TEAM.grpc_listen} http2;" in text
    assert f"grpc_pass grpc://$a2a_team:{COMPOSE_TEAM.grpc_port};" in text


class _Dns:
    """A DNS server on loopback answering every A query with `addresses` (TTL 5 s), as Docker's does for a
    network alias that several containers carry."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.names: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(512)
            except OSError:
                return
            labels, i = [], 12
            while data[i]:
                labels.append(data[i + 1 : i + 1 + data[i]].decode())
                i += 1 + data[i]
            qtype = struct.unpack("!H", data[i + 1 : i + 3])[0]
            self.names.append(".".join(labels))
            answers = self.addresses if qtype == 1 else []
            header = struct.pack("!HHHHHH", struct.unpack("!H", data[:2])[0], 0x8180, 1, len(answers), 0, 0)
            records = b"".join(
                struct.pack("!HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(a) for a in answers
            )
            self.sock.sendto(header + data[12 : i + 5] + records, peer)

    def close(self) -> None:
        self.sock.close()


class _Replica(BaseHTTPRequestHandler):
    """A team replica: echoes what reached it; `/stream` sends one event, then the next when told."""

    next_event = threading.Event()

    def do_GET(self) -> None:
        if self.path.endswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: one\n\n")
            self.wfile.flush()
            self.next_event.wait(10)
            self.wfile.write(b"data: two\n\n")
            return
        body = orjson.dumps({"path": self.path, "host": self.headers["Host"]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until_listening(proc: subprocess.Popen[bytes], port: int, conf_dir: Path, within_s: float = 60) -> None:
    """Once nginx accepts connections on `port`; if it exits or is not listening in time, fail with its
    stderr and error.log (stopped first: its stderr is read only once it has ended, never blocking)."""
    deadline = time.monotonic() + within_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    errors = (conf_dir / "error.log").read_text(errors="replace") if (conf_dir / "error.log").exists() else ""
    raise AssertionError(
        f"nginx not listening on {port} (exit {proc.returncode}):\n{stderr}\n{errors[-3000:]}"
    )


def test_nginx_reaches_the_team_by_name_and_moves_past_a_dead_address(tmp_path: Path):
    """The team server as compose renders it, with a real nginx: the alias resolved per request to two
    addresses of which one has no replica (a stopped one), every request answered by the live one with its
    path and Host intact, and an event stream passed through unbuffered."""
    try:
        nginx = nginx_binary()
    except FileNotFoundError:
        pytest.skip("nginx is not installed: `make test` installs it (scripts/install-deb.sh)")
    replica = ThreadingHTTPServer(("127.0.0.1", 0), _Replica)
    threading.Thread(target=replica.serve_forever, daemon=True).start()
    dns = _Dns(["127.0.0.2", "127.0.0.1"])  # nothing listens on 127.0.0.2
    listen = _free_port()
    team = TeamProxy(
        host=COMPOSE_TEAM.host,
        port=replica.server_address[1],
        listen=f"127.0.0.1:{listen}",
        resolver=f"127.0.0.1:{dns.port}",
    )
    conf = write_local(tmp_path, ["127.0.0.1:9"], _free_port(), team=team)
    assert nginx_command(tmp_path, conf)[0] == nginx
    proc = subprocess.Popen(nginx_command(tmp_path, conf), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _until_listening(proc, listen, tmp_path)
        url = f"http://127.0.0.1:{listen}"
        path = "/agents/implementer/.well-known/agent-card.json?x=1"
        with httpx.Client(timeout=30) as client:
            for _ in range(20):
                r = client.get(url + path, headers={"Host": "team.example:8081"})
                assert r.status_code == 200, r.text
                assert r.json() == {"path": path, "host": "team.example:8081"}
            with client.stream("GET", url + "/agents/reviewer/stream") as r:
                lines = r.iter_lines()
                assert next(lines) == "data: one", "the first event was held back"
                _Replica.next_event.set()
                assert [line for line in lines if line] == ["data: two"]
        assert COMPOSE_TEAM.host in dns.names, "the name was not looked up"
        errors = (tmp_path / "error.log").read_text()
        # 20 requests, the two addresses in random order: the dead one was tried (and passed over) too.
        assert "127.0.0.2" in errors and "Connection refused" in errors, errors
    finally:
        proc.terminate()
        proc.wait(10)
        replica.shutdown()
        dns.close()
        _Replica.next_event.clear()
