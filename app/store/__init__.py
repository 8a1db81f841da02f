"""Persistence: the tables, the engines, the reads, the group-commit writer (`writer.py`) and the rows it
commits (`rows.py`, `write.py`), leases and the queue, Idempotency-Keys, discovery's instances, retention,
and telling an outage from a bug (`outage.py`). Column names live here only.

Of ours it imports only the protocol's model, events and usage (and `app.telemetry`, `app.background`)."""
