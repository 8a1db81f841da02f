"""Webhooks: their configs (`configs.py`), the outbox written with each event (`outbox.py`), the body in each
protocol version's shape (`payloads.py`), the SSRF guard (`ssrf.py`) and the delivery worker (`deliverer.py`).

Of ours it imports the protocol and, of the store, its tables and outage helpers (`store.tables`,
`store.outage`), and `app.options`, `app.telemetry`."""
