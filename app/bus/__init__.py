"""Event fan-out: the in-process bus (single node) behind one interface."""

from .base import Bus, Subscription
from .memory import MemoryBus

__all__ = ["Bus", "MemoryBus", "Subscription"]
