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
- **Network** (`AGENT_NETWORK=egress`): only its own loopback, where `bridge.py` (this package's) relays
  the proxy port to the host's `EgressProxy`.

Why not `srt` (@anthropic-ai/sandbox-runtime): on Linux it lets the process read the whole filesystem but
the paths it is told to deny, needs socat, and keeps one HOME; the jail here must show nothing but its
own folders, so only the bwrap call and a small proxy were written.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from ..errors import SettingError
from ..options import AgentOptions

PROXY_PORT = 3128
"""The port of the egress relay on the jail's own loopback (each jail has its own)."""
IN_JAIL_SOCKET = "/run/a2a/egress.sock"
IN_JAIL_BRIDGE = "/run/a2a/bridge.py"
BRIDGE = Path(str(resources.files("app.agents.jail") / "bridge.py"))
"""The relay run inside the jail (standard library only), a resource of this package bound in read-only."""
TOOLS_SERVER_NAME = "a2a"
"""The run's tool server in each CLI's MCP configuration: Claude Code calls its tools `mcp__a2a__<tool>`."""
IN_JAIL_TOOLS = "/run/a2a/tools"
"""Where a jail shows its run's tool folder (`cli/tools.py`: the socket, a CLI's settings naming it)."""
IN_JAIL_TOOLS_RELAY = "/run/a2a/tools_relay.py"
TOOLS_RELAY = Path(str(resources.files("app.agents.jail") / "tools_relay.py"))
"""The stdio MCP server a CLI starts for its run's tools (`cli/tools.py`): a relay to the run's socket."""
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


def principal_root(options: AgentOptions, principal: str) -> Path:
    return (Path(options.workspace_root) / principal_key(principal)).resolve()


def principal_home(options: AgentOptions, principal: str) -> Path:
    """The principal's CLI HOME, created (and seeded from AGENT_HOME_SEED) on first use."""
    home = principal_root(options, principal) / ".home"
    if not home.is_dir():
        home.mkdir(parents=True, exist_ok=True)
        if options.home_seed:
            shutil.copytree(options.home_seed, home, dirs_exist_ok=True, symlinks=True)
    return home


def agent_env(
    options: AgentOptions,
    home: Path,
    adapter_env: Mapping[str, str],
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a CLI: the allowlist, then what the operator and the adapter add."""
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if k in BASE_ENV or k.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("LANG", "C.UTF-8")
    env |= {k: source[k] for k in options.env_passthrough if k in source}
    env |= adapter_env
    env |= options.env
    env["HOME"] = str(home)
    env["TMPDIR"] = "/tmp" if options.sandbox == "bwrap" else tempfile.gettempdir()
    if options.sandbox == "bwrap" and options.network == "egress":
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


def _binds(binary: str, path: str | None, options: AgentOptions) -> list[str]:
    """What `Jail.wrap` shows read-only besides the system: the CLI's install, its `#!` interpreter when
    that is a program outside /usr, and AGENT_SANDBOX_READ."""
    binds = [_install_root(binary)]
    if (interpreter := _interpreter(binary, path)) and not interpreter.startswith("/usr/"):
        binds.append(interpreter)
    return binds + [os.path.realpath(p) for p in options.sandbox_read]


def relay_python() -> tuple[str, list[str]]:
    """The python3 a jail runs its relays with (the system's when there is one) and the binds it needs:
    its installation, read-only, when it is not under /usr."""
    python = shutil.which("python3", path="/usr/bin:/bin") or os.path.realpath(sys.executable)
    if python.startswith("/usr/"):
        return python, []
    return python, ["--ro-bind", sys.base_prefix, sys.base_prefix]


class Jail:
    """Builds the bubblewrap command line of one CLI run."""

    def __init__(self, options: AgentOptions, egress_socket: Path | None) -> None:
        self.options = options
        self.egress_socket = egress_socket

    def wrap(
        self,
        argv: list[str],
        workspace: Path,
        home: Path,
        env: Mapping[str, str],
        bridge: bool = True,
        tools: Path | None = None,
    ) -> list[str]:
        """`bwrap ... -- [bridge] argv`, argv[0] resolved; FileNotFoundError when it does not exist.
        `bridge=False` leaves out the egress relay (the start-up check runs `true` without a proxy).
        `tools`: the run's tool folder (`cli/tools.py`: its socket alone, or with a CLI's settings), shown
        read-only at IN_JAIL_TOOLS with the relay at IN_JAIL_TOOLS_RELAY."""
        path = env.get("PATH")
        binary = resolve_binary(argv[0], path)
        binds = _binds(binary, path, self.options)
        out = ["bwrap", "--die-with-parent", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc"]
        out += ["--unshare-uts", "--hostname", "agent", "--unshare-cgroup-try"]
        for d in SYSTEM_DIRS:
            out += ["--ro-bind-try", d, d]
        for name in ETC_FILES:
            out += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        egress = self.options.network == "egress"
        if not egress:
            out += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        for p in binds:
            out += ["--ro-bind-try", p, p]
        out += ["--bind", str(home), str(home), "--bind", str(workspace), str(workspace)]
        out += ["--chdir", str(workspace)]
        command = [binary, *argv[1:]]
        python, python_binds = relay_python()
        shown_python = False
        if tools is not None:
            out += ["--ro-bind", str(TOOLS_RELAY), IN_JAIL_TOOLS_RELAY]
            out += ["--ro-bind", str(tools), IN_JAIL_TOOLS, *python_binds]
            shown_python = True
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
            if not shown_python:
                out += python_binds
            relay = [python, "-I", "-S", IN_JAIL_BRIDGE, str(PROXY_PORT), IN_JAIL_SOCKET, "--"]
            command = relay + command
        return [*out, "--remount-ro", "/", "--", *command]


def _exposes(path: str, options: AgentOptions) -> str | None:
    """What of the server an AGENT_SANDBOX_READ path would show every jail, if anything."""
    shown = Path(path).resolve()
    guarded = {
        "the workspaces of every principal": Path(options.workspace_root).resolve(),
        "the repositories' cache (REPO_CACHE_ROOT)": Path(options.repo_cache_root).resolve(),
    }
    if options.database_file:
        guarded["the database"] = Path(options.database_file).resolve()
    return next((what for what, p in guarded.items() if p == shown or shown in p.parents), None)


def _check_credentials(options: AgentOptions) -> None:
    """The push credentials (files the server's git reads) must be out of every jail's sight: not under
    what a jail binds (the system folders, the shown files of /etc, AGENT_SANDBOX_READ, the workspaces and
    HOMEs, AGENT_HOME_SEED, which is copied into each HOME); and without the jail an agent could read them."""
    for name in ("push_token_file", "push_ssh_key_file"):
        path = getattr(options, name)
        if not path:
            continue
        if options.sandbox != "bwrap":
            raise options.error(
                name,
                f"{path}: push credentials need the jail (AGENT_SANDBOX=bwrap), else an agent reads them",
            )
        real = Path(os.path.realpath(path))
        shown = [
            *SYSTEM_DIRS,
            *(f"/etc/{n}" for n in ETC_FILES),
            *options.sandbox_read,
            options.workspace_root,
            *([options.home_seed] if options.home_seed else []),
        ]
        for root in shown:
            top = Path(os.path.realpath(root))
            if real == top or top in real.parents:
                raise options.error(name, f"{path} is under {root}, which a jail shows its agent")


def check(options: AgentOptions) -> None:
    """Fail start-up (SettingError, one line) when the jail cannot run here, unless AGENT_SANDBOX=none,
    or when AGENT_SANDBOX_READ would show the jails what they must not see, or the push credentials are
    in their sight (`_check_credentials`)."""
    _check_credentials(options)
    if options.sandbox != "bwrap":
        return
    for path in options.sandbox_read:
        if what := _exposes(path, options):
            raise options.error("sandbox_read", f"{path} holds {what}; name a narrower path")
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
        argv = Jail(options, None).wrap(["true"], root / "ws", root / "home", {"PATH": DEFAULT_PATH}, False)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SettingError(
            "AGENT_SANDBOX",
            f"bubblewrap cannot run here ({why}); allow it (user namespaces, or root) "
            "or set AGENT_SANDBOX=none to run coding agents without a jail",
        )


# ---- the start-up check of a command the jail cannot run ------------------------------------------------

SHIM_MAX_BYTES = 64 * 1024
"""A script read for the program it `exec`s: a shim or wrapper is small; a larger script is not followed."""
_EXEC_FLAGS = {"-a", "-c", "-l", "-cl", "-lc"}


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _visible_roots(binary: str, path: str | None, options: AgentOptions) -> list[str]:
    """What of the host's files a jail shows (real paths): the system, a few files of /etc, what
    `Jail.wrap` binds for `binary`, and the repository (AGENT_REPO_PATH) it works in."""
    roots = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.exists(d)]
    roots += [os.path.realpath(f"/etc/{name}") for name in ETC_FILES]
    roots += [os.path.realpath(p) for p in _binds(binary, path, options)]
    if options.repo_path:
        roots.append(os.path.realpath(options.repo_path))
    return roots


def _shown(file: str, roots: list[str]) -> bool:
    """Whether the jail shows `file` at its path: where it is (its folder's real path) and what it is."""
    here = os.path.join(os.path.realpath(os.path.dirname(file) or "."), os.path.basename(file))
    return _under(here, roots) and _under(os.path.realpath(file), roots)


def _lookup(name: str, path: str | None, roots: list[str]) -> tuple[str | None, str | None]:
    """`name` on PATH as the jail finds it (the first entry it shows) and as the host does (the first
    entry at all): (in the jail, on the host), either None when there is none."""
    host = None
    for folder in (path or DEFAULT_PATH).split(os.pathsep):
        found = os.path.join(folder or ".", name)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            continue
        if _shown(found, roots):
            return found, host or found
        host = host or found
    return None, host


def _runs(script: str, path: str | None, roots: list[str]) -> list[str]:
    """The programs a script starts by name or path: its `#!` interpreter (`env X` found on PATH as
    the jail would) and what a line `exec PROGRAM ...` runs (a pyenv or asdf shim's real command);
    a program that can be found only outside the jail is given as the host finds it."""
    try:
        with open(script, "rb") as f:
            text = f.read(SHIM_MAX_BYTES + 1)
    except OSError:
        return []
    if not text.startswith(b"#!"):
        return []
    lines = text.decode(errors="replace").splitlines()
    words = lines[0][2:].split()
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    programs = words[:1]
    if len(text) <= SHIM_MAX_BYTES:
        for line in lines[1:]:
            if not line.lstrip().startswith("exec "):
                continue
            try:
                argv = shlex.split(line, comments=True)[1:]
            except ValueError:
                continue
            while argv and argv[0] in _EXEC_FLAGS:
                argv = argv[2:] if argv[0] == "-a" else argv[1:]
            if argv and not any(c in argv[0] for c in "$`<>&|;(") and not argv[0][:1].isdigit():
                programs.append(argv[0])
    out = []
    for program in programs:
        if os.sep in program:
            out.append(program if os.path.isabs(program) else "")
        else:
            jailed, host = _lookup(program, path, roots)
            out.append(jailed or host or "")
    return [p for p in out if p]


def _to_show(file: str) -> str:
    """What to show for a hidden file: its tool's folder when in a home (`~/.pyenv`, which a pyenv needs
    whole), else the file's folder."""
    real = Path(os.path.realpath(file))
    for home in {Path.home(), *Path("/home").glob("*")}:
        if home in real.parents:
            return str(home / real.relative_to(home).parts[0])
    return str(real.parent)


def _elsewhere(name: str, path: str | None, options: AgentOptions) -> str | None:
    """Another `name` on PATH that the jail shows without binding it (e.g. /usr/bin/python3)."""
    roots = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.exists(d)]
    roots += [os.path.realpath(p) for p in options.sandbox_read]
    return _lookup(name, path, roots)[0]


def check_command(
    argv: list[str], env_path: str | None, options: AgentOptions, name: str, setting: str | None = None
) -> None:
    """Fail start-up (SettingError, one line) when `argv` (the CLI, or the `ndjson` adapter's command)
    cannot run as configured. With the jail: its program, followed through symlinks, `#!` interpreters
    and shims that `exec` another program (pyenv's `~/.pyenv/shims/python3` runs
    `~/.pyenv/libexec/pyenv`), leads to a file the jail hides, or a file it is given by absolute path is
    hidden. With the jail or without: a file it is given by relative path is here but not where the
    command runs (the task's workspace). `name` is the field (`bin`, `command`), `setting` its server-wide
    setting when the field has none of its own. A program not found at all is left to each run's error."""
    if not argv:
        return
    try:
        binary = resolve_binary(argv[0], env_path)
    except FileNotFoundError:
        return
    which = options.where(name, setting)
    shows = options.where("sandbox_read")
    if options.sandbox == "bwrap":
        roots = _visible_roots(binary, env_path, options)
        todo, seen = [(binary, [binary])], {binary}
        while todo:
            script, chain = todo.pop(0)
            for program in _runs(script, env_path, roots):
                if not _shown(program, roots):
                    ran = " runs ".join([*chain, program])
                    instead = None if os.sep in argv[0] else _elsewhere(argv[0], env_path, options)
                    other = f", or name a program the jail sees (e.g. {instead})" if instead else ""
                    message = (
                        f"{argv[0]} cannot run in the jail: {ran}, which the jail hides; "
                        f"show {_to_show(program)} with {shows}{other}"
                    )
                    raise options.error(name, message, setting)
                real = os.path.realpath(program)
                if real not in seen and len(seen) < 8:
                    seen.add(real)
                    todo.append((real, [*chain, program]))
        for arg in argv[1:]:
            if os.path.isabs(arg) and os.path.isfile(arg) and not _shown(arg, roots):
                message = f"{arg} (in {which}) is hidden in the jail: show it with {shows}"
                raise options.error(name, message, setting)
    for arg in argv[1:]:
        if os.path.isabs(arg) or arg.startswith("-") or not os.path.isfile(arg):
            continue
        if options.repo_path and (Path(options.repo_path) / arg).is_file():
            continue
        where = "the repository (AGENT_REPO_PATH)" if options.repo_path else "each task's workspace"
        message = (
            f"{arg} (in {which}) is a file here, but the command runs in {where}: give its absolute path"
        )
        if options.sandbox == "bwrap":
            message += f" and show it with {shows}"
        raise options.error(name, message, setting)
