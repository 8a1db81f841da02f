"""Where and how a coding-agent CLI runs: per-principal folders, an allowlisted environment, a bwrap jail.

A CLI runs shell commands a model picks from a prompt any caller controls, so it gets nothing it does not
need (docs/agents.md "Security of coding agents"):

- **Folders.** `<AGENT_WORKSPACE_ROOT>/<principal hash>/<contextId>` is the workspace and
  `<root>/<principal hash>/.home` the HOME (CLI sessions, credentials), so two principals never share either.
- **Environment.** PATH, locale, TERM, HOME, TMPDIR, what the adapter sets, AGENT_ENV and the server
  variables named by AGENT_ENV_PASSTHROUGH; never the rest of the server's environment.
- **Jail** (`AGENT_SANDBOX=bwrap`): bubblewrap with no capabilities, its own pid, ipc, uts and (with
  egress) network namespaces; the system (/usr, a few files of /etc) and the CLI's install read-only,
  the workspace and HOME read-write, a private /tmp, /proc of its own pid namespace; nothing else. It dies
  with the server (`--die-with-parent`), and the whole pid namespace dies with the CLI.
- **Network** (`AGENT_NETWORK=egress`): only its own loopback, where `jail_bridge.py` relays the proxy
  port to the host's `EgressProxy`.

Why not `srt` (@anthropic-ai/sandbox-runtime): on Linux it lets the process read the whole filesystem but
the paths it is told to deny, needs socat, and keeps one HOME; the jail here must show nothing but its
own folders, so only the bwrap call and a small proxy were written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from app.settings import SettingError, Settings

PROXY_PORT = 3128
"""The port of the egress relay on the jail's own loopback (each jail has its own)."""
IN_JAIL_SOCKET = "/run/a2a/egress.sock"
IN_JAIL_BRIDGE = "/run/a2a/jail_bridge.py"
BRIDGE = Path(__file__).with_name("jail_bridge.py")
BASE_ENV = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM")
"""Server variables every CLI gets, with every LC_*."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "gai.conf",
    "mime.types",
    "os-release",
    "debian_version",
    "gitconfig",
    "terminfo",
    "bash.bashrc",
    "profile",
    "inputrc",
    "npmrc",
)
"""What of /etc a jail sees: libraries, certificates, users, time zone; no host secrets."""
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def principal_key(principal: str) -> str:
    """The folder name of a principal: a hash, so a name never shapes a path."""
    return hashlib.sha256(principal.encode()).hexdigest()[:32]


def principal_root(settings: Settings, principal: str) -> Path:
    return (Path(settings.agent_workspace_root) / principal_key(principal)).resolve()


def principal_home(settings: Settings, principal: str) -> Path:
    """The principal's CLI HOME, created (and seeded from AGENT_HOME_SEED) on first use."""
    home = principal_root(settings, principal) / ".home"
    if not home.is_dir():
        home.mkdir(parents=True, exist_ok=True)
        if settings.agent_home_seed:
            shutil.copytree(settings.agent_home_seed, home, dirs_exist_ok=True, symlinks=True)
    return home


def agent_env(
    settings: Settings, home: Path, adapter_env: Mapping[str, str], source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of a CLI: the allowlist, then what the operator and the adapter add."""
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if k in BASE_ENV or k.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("LANG", "C.UTF-8")
    env |= {k: source[k] for k in settings.agent_passthrough_names if k in source}
    env |= adapter_env
    env |= settings.agent_env
    env["HOME"] = str(home)
    env["TMPDIR"] = "/tmp" if settings.agent_sandbox == "bwrap" else tempfile.gettempdir()
    if settings.agent_sandbox == "bwrap" and settings.agent_network_mode == "egress":
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            env[name] = proxy
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(name, None)
    return env


def resolve_binary(name: str, path: str | None) -> str:
    """The real path of the CLI's executable (FileNotFoundError when there is none), for the jail to bind."""
    found = shutil.which(name, path=path) if os.sep not in name else name
    if found is None or not os.access(found, os.X_OK):
        raise FileNotFoundError(2, "No such file or directory", name)
    return os.path.realpath(found)


def _install_root(binary: str) -> str:
    """What of the CLI's install the jail binds: its outermost node_modules, else the file alone."""
    parts = Path(binary).parts
    if "node_modules" in parts:
        return str(Path(*parts[: parts.index("node_modules") + 1]))
    return binary


def _interpreter(binary: str, path: str | None) -> str | None:
    """The `#!` interpreter of a script (`env node` resolved on PATH) when it is a program of its own (an
    ELF file, as node is), to bind when it is not under /usr; a wrapper script (a pyenv shim) is not."""
    try:
        with open(binary, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-")]
    found = shutil.which(words[0], path=path) if words else None
    if found is None:
        return None
    found = os.path.realpath(found)
    with open(found, "rb") as f:
        return found if f.read(4) == b"\x7fELF" else None


class Jail:
    """Builds the bubblewrap command line of one CLI run."""

    def __init__(self, settings: Settings, egress_socket: Path | None) -> None:
        self.settings = settings
        self.egress_socket = egress_socket

    def wrap(
        self, argv: list[str], workspace: Path, home: Path, env: Mapping[str, str], bridge: bool = True
    ) -> list[str]:
        """`bwrap ... -- [bridge] argv`, argv[0] resolved; FileNotFoundError when it does not exist.
        `bridge=False` leaves out the egress relay (the start-up check runs `true` without a proxy)."""
        path = env.get("PATH")
        binary = resolve_binary(argv[0], path)
        binds = [_install_root(binary)]
        if (interpreter := _interpreter(binary, path)) and not interpreter.startswith("/usr/"):
            binds.append(interpreter)
        binds += [os.path.realpath(p) for p in self.settings.agent_sandbox_read_paths]
        out = ["bwrap", "--die-with-parent", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc"]
        out += ["--unshare-uts", "--hostname", "agent", "--unshare-cgroup-try"]
        for d in SYSTEM_DIRS:
            out += ["--ro-bind-try", d, d]
        for name in ETC_FILES:
            out += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        egress = self.settings.agent_network_mode == "egress"
        if not egress:
            out += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        for p in binds:
            out += ["--ro-bind-try", p, p]
        out += ["--bind", str(home), str(home), "--bind", str(workspace), str(workspace)]
        out += ["--chdir", str(workspace)]
        command = [binary, *argv[1:]]
        if egress:
            out.append("--unshare-net")
        if egress and bridge:
            assert self.egress_socket is not None, "egress needs the proxy started (CliAgent.setup)"
            out += [
                "--ro-bind",
                str(BRIDGE),
                IN_JAIL_BRIDGE,
                "--bind",
                str(self.egress_socket),
                IN_JAIL_SOCKET,
            ]
            python = shutil.which("python3", path="/usr/bin:/bin") or os.path.realpath(sys.executable)
            if not python.startswith("/usr/"):
                out += ["--ro-bind", sys.base_prefix, sys.base_prefix]
            relay = [python, "-I", "-S", IN_JAIL_BRIDGE, str(PROXY_PORT), IN_JAIL_SOCKET, "--"]
            command = relay + command
        return [*out, "--remount-ro", "/", "--", *command]


def _exposes(path: str, settings: Settings) -> str | None:
    """What of the server an AGENT_SANDBOX_READ path would show every jail, if anything."""
    shown = Path(path).resolve()
    guarded = {"the workspaces of every principal": Path(settings.agent_workspace_root).resolve()}
    if settings.database_url.startswith("sqlite"):
        guarded["the database"] = Path(settings.database_url.split(":///", 1)[-1]).resolve()
    return next((what for what, p in guarded.items() if p == shown or shown in p.parents), None)


def check(settings: Settings) -> None:
    """Fail start-up (SettingError, one line) when the jail cannot run here, unless AGENT_SANDBOX=none,
    or when AGENT_SANDBOX_READ would show the jails what they must not see."""
    if settings.agent_sandbox != "bwrap":
        return
    for path in settings.agent_sandbox_read_paths:
        if what := _exposes(path, settings):
            raise SettingError("AGENT_SANDBOX_READ", f"{path} holds {what}; name a narrower path")
    if shutil.which("bwrap") is None:
        raise SettingError(
            "AGENT_SANDBOX",
            "bubblewrap (bwrap) is not installed: install Debian's bubblewrap, "
            "or set AGENT_SANDBOX=none to run coding agents without a jail",
        )
    with tempfile.TemporaryDirectory(prefix="a2a-jail-check-") as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "home").mkdir()
        argv = Jail(settings, None).wrap(["true"], root / "ws", root / "home", {"PATH": DEFAULT_PATH}, False)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SettingError(
            "AGENT_SANDBOX",
            f"bubblewrap cannot run here ({why}); allow it (user namespaces, or root) "
            "or set AGENT_SANDBOX=none to run coding agents without a jail",
        )
