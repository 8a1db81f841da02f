"""Per-principal task-creation rate and open-stream cap behind one interface: in memory (one process) or
in Redis (every replica shares the same numbers)."""

from .base import Slot, StreamSlots, TaskRate
from .memory import MemoryStreamSlots, MemoryTaskRate

__all__ = ["MemoryStreamSlots", "MemoryTaskRate", "Slot", "StreamSlots", "TaskRate"]
