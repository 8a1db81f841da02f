"""The server's HTTP and gRPC face, in rooms by audience: `bindings/` (the A2A wire), `ops/` (the operations
the bindings run), `edge/` (what stands in front of every route), `card/` (the agent card) and `endpoints/`
(the server's own routes beside A2A).

At this level only what the rooms share: the leaves `paths`, `versions`, `errors`, `extensions`, `sanity` and
`faults`, which import no other module of `api/` (so any room may use them), and `deps` (`Components`,
`owner_of`), which imports only `edge/auth.py` for the principal's key and, for types, the card and the
metrics. Which room may import which is checked by `tests/api/test_import_cycles.py`.

Beyond `api/` it imports the protocol, the task service and worker desk, the limits, the agents' `sdk` and
`errors`, and `app.roles` (the card); never the settings (docs/ARCHITECTURE.md, "Rooms", lists the few other
reaches)."""
