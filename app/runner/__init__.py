"""What runs in the background of a role: its agent runs (`runner.py`, one `run.py` `AgentRun` per task), the
reaper of lost runs (`reaper.py`), `Idle` for a role run elsewhere, discovery, prices and retention; and the
remote worker's stand-ins for a replica's stores (`remote.py`).

It imports what a run needs of `app.tasks` (`held`, `step`, `live`, `losses`, `worker_wire`), the agents'
`sdk` and `emissions`, the protocol, and the store's `leases`, `instances`, `retention` and `outage`; never
the edge or the settings."""
