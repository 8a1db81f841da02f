"""The coding agents' jail: bubblewrap and the allowlisted environment (`sandbox.py`), the egress proxy in the
server (`egress.py`) and the relay run inside the jail (`bridge.py`, standard library only, bound in as a file
of this package). Nothing is imported here: `options.py` reads the egress allowlist parser without loading
the sandbox, which itself reads `AgentOptions`."""
