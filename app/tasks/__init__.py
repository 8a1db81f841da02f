"""The task hub: the task service for the edge (`service.py`), the tasks held here and the one door of every
write (`live.py`), what a step makes of a task (`step.py`), reading and following (`follow.py`), forwarding
to a task's holder (`control.py`), copies of a send (`copies.py`), endings no run will make (`losses.py`),
and the server's side of remote workers (`workers.py`, `worker_wire.py`).

It imports the protocol, the store, the bus and push (and `app.telemetry`); never the runner (`executor.py`
says what it needs of one), the agents or the edge."""
