"""CPU accounting from /proc: who used the two cores during a point, and waiting for a quiet machine.

The bench machine may be shared with other work (someone's test run, say), so each point records the CPU
of the server, the load generator, PostgreSQL and everyone else (`other`): a point with much `other` was
disturbed, and is measured again.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def snapshot() -> dict[int, tuple[str, float]]:
    """Every live process: its name and CPU seconds so far."""
    out: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (
                    Path(entry.path, "comm").read_text().strip(),
                    proc_cpu_s(int(entry.name)),
                )
            except OSError:
                continue
    return out


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it (nginx's master and its workers, say)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle, summed over cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLOCK_TICKS


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the load generator runs as one)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@dataclass
class CpuUse:
    """Cores in use over a window: 1.0 is one core busy for all of it.

    `other` is the CPU of live processes that are neither the server, the load generator, PostgreSQL nor
    this script: someone else's work on the machine. (Processes that ended within the window are missed.)
    With several server processes, `server` is their sum and `servers` each one's share; `groups` holds
    named helpers given by pid (nginx, Redis), which then do not count as `other`.
    """

    server: float
    loadgen: float
    postgres: float
    other: float
    machine: float
    servers: tuple[float, ...] = ()
    groups: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            k: round(getattr(self, k), 2) for k in ("server", "loadgen", "postgres", "other", "machine")
        }
        if len(self.servers) > 1:
            out["servers"] = [round(v, 2) for v in self.servers]
        out.update({k: round(v, 2) for k, v in self.groups.items()})
        return out


class CpuWindow:
    """Start it before a point, `stop()` after: the CPU each party used meanwhile.

    `server_pid` is one process or several (replicas); `groups` maps a name to pids counted apart
    (their children included, e.g. nginx's workers).
    """

    def __init__(
        self, server_pid: int | Sequence[int], groups: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        self.pids = [server_pid] if isinstance(server_pid, int) else list(server_pid)
        self.groups = {
            name: {d for p in pids for d in descendants(p)} for name, pids in (groups or {}).items()
        }
        self.t0 = time.monotonic()
        self.procs0 = snapshot()
        self.kids0 = children_cpu_s()
        self.busy0 = machine_busy_s()

    def stop(self) -> CpuUse:
        wall = max(time.monotonic() - self.t0, 1e-6)
        procs = snapshot()
        me = os.getpid()
        postgres = other = 0.0
        servers = dict.fromkeys(self.pids, 0.0)
        groups = dict.fromkeys(self.groups, 0.0)
        for pid, (name, cpu) in procs.items():
            delta = cpu - self.procs0.get(pid, (name, 0.0))[1]
            group = next((g for g, pids in self.groups.items() if pid in pids), None)
            if pid in servers:
                servers[pid] = delta
            elif group is not None:
                groups[group] += delta
            elif name == "postgres":
                postgres += delta
            elif pid != me:
                other += delta
        return CpuUse(
            server=sum(servers.values()) / wall,
            loadgen=(children_cpu_s() - self.kids0) / wall,
            postgres=postgres / wall,
            other=other / wall,
            machine=(machine_busy_s() - self.busy0) / wall,
            servers=tuple(v / wall for v in servers.values()),
            groups={g: v / wall for g, v in groups.items()},
        )


def wait_quiet(max_busy_cores: float, timeout_s: float, sample_s: float = 1.0) -> float:
    """Wait until the machine is nearly idle (or `timeout_s` passes); the busy cores last seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        b0 = machine_busy_s()
        time.sleep(sample_s)
        busy = (machine_busy_s() - b0) / sample_s
        if busy <= max_busy_cores or time.monotonic() >= deadline:
            return busy
