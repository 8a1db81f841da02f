"""An optional py-spy profile of a server under load, outside the measured points.

py-spy pauses the process for every sample, so its run is never one of the figures: it is an extra pass at
one concurrency. The collapsed stacks are saved next to the results; `summarize` ranks functions by the
share of samples in which they run themselves (self) or sit anywhere on the stack (inclusive), lines of
one function counted together.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

TOP = 15
_LINE = re.compile(r":\d+\)$")


def pyspy() -> str | None:
    """py-spy from PATH or from this virtualenv (`.venv/bin/pip install py-spy`)."""
    local = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(local) if local.exists() else None)


def start(pid: int, seconds: float, out: Path, rate: int = 200) -> subprocess.Popen[bytes] | None:
    """Start recording `pid` for `seconds` into `out` (collapsed stacks); None without py-spy."""
    exe = pyspy()
    if exe is None:
        return None
    cmd = [exe, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate)]
    cmd += ["-f", "raw", "-o", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summarize(path: Path, top: int = TOP) -> str:
    """The hottest functions of a collapsed-stack file, self and inclusive, as text."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [
            _LINE.sub(")", f) for f in stack.split(";") if f and not f.startswith(("process ", "thread "))
        ]
        if not frames:
            continue
        total += n
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples; self:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in self_time.most_common(top)]
    lines.append("inclusive (app/ only):")
    app = [(f, n) for f, n in inclusive.most_common() if "(app/" in f][:top]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in app]
    return "\n".join(lines)
