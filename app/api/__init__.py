"""HTTP edge: JSON-RPC, REST aliases, SSE, the agent card, health."""
