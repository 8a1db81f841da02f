"""Per-principal task-creation rate and open-stream cap behind one interface: in memory (one process) or
in Redis (every replica shares the same numbers); `build` picks them for a `LimitOptions`.

Of ours it imports only the protocol's errors (and `app.options`, `app.background`); never the settings
(`tests/api/test_import_cycles.py`)."""

from .base import Slot, StreamSlots, TaskRate
from .factory import LimitOptions, Limits, build
from .memory import MemoryStreamSlots, MemoryTaskRate

__all__ = [
    "LimitOptions",
    "Limits",
    "MemoryStreamSlots",
    "MemoryTaskRate",
    "Slot",
    "StreamSlots",
    "TaskRate",
    "build",
]
