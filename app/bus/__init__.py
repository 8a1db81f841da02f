"""Doorbells and control between replicas: the interface (`base.py`: `Bus`, `Subscription`), one process's
own bus (`memory.py`) and Redis pub/sub (`redis.py`). It rings only after the commit: the database is the
truth, the bus a doorbell.

Of ours it imports only the protocol's model and events (and the leaves `app.telemetry`, `app.background`)."""

from .base import Bus, Subscription
from .memory import MemoryBus

__all__ = ["Bus", "MemoryBus", "Subscription"]
