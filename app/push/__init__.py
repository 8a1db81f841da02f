"""Webhooks: their configs (`configs.py`), the outbox written with each event (`outbox.py`), the body in each
protocol version's shape (`payloads.py`) and the delivery worker (`deliverer.py`), which calls a webhook
through the SSRF guard (`app/ssrf.py`, a leaf the coding agents' files by URL share).

Of ours it imports the protocol and, of the store, its tables and outage helpers (`store.tables`,
`store.outage`), and `app.options`, `app.ssrf`, `app.telemetry`."""
