"""Agents: the public agent API (`sdk.py`), the AgentEvent layer on it (`events.py`), the built-ins, the CLI
adapters (`cli/`) and their jail (`jail/`), which run with the `AgentOptions` they are given (`options.py`).

Of ours it imports only the domain model (`app.protocol.model`, `events`, `usage`; never a codec) and
`app.options`, never the settings (`tests/agents/test_options.py`)."""
