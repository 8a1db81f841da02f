"""The server's own routes beside A2A: the console (`console.py`), the remote workers' protocol
(`workers.py`), `GET /usage`, discovery's `GET /agents` (`discovery.py`), the health checks, and the metrics
read from the components at scrape time (`metrics_live.py`).

They may import `deps`, `edge/auth.py` (the principal the guard left) and the shared leaves; no module of
`api/` imports them, so an endpoint can change without touching the A2A path."""
