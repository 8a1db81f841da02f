"""CPU accounting from /proc: who used the two cores during a point, and waiting for a quiet machine.

The bench machine may be shared with other work (someone's test run, say), so each point records the CPU
of the server, the load generator, PostgreSQL and everyone else (`other`): a point with much `other` was
disturbed, and is measured again.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
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
    """

    server: float
    loadgen: float
    postgres: float
    other: float
    machine: float

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in vars(self).items()}


class CpuWindow:
    """Start it before a point, `stop()` after: the CPU each party used meanwhile."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.t0 = time.monotonic()
        self.procs0 = snapshot()
        self.kids0 = children_cpu_s()
        self.busy0 = machine_busy_s()

    def stop(self) -> CpuUse:
        wall = max(time.monotonic() - self.t0, 1e-6)
        procs = snapshot()
        me = os.getpid()
        postgres = other = server = 0.0
        for pid, (name, cpu) in procs.items():
            delta = cpu - self.procs0.get(pid, (name, 0.0))[1]
            if pid == self.pid:
                server = delta
            elif name == "postgres":
                postgres += delta
            elif pid != me:
                other += delta
        return CpuUse(
            server=server / wall,
            loadgen=(children_cpu_s() - self.kids0) / wall,
            postgres=postgres / wall,
            other=other / wall,
            machine=(machine_busy_s() - self.busy0) / wall,
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
