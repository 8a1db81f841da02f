"""The A2A wire: JSON-RPC (`jsonrpc.py`), REST v0.3, v1.0 and the aliases (`rest*.py`), gRPC
(`grpc_server.py`, `grpc_v03.py`, `grpc_v10.py`), SSE framing and the OpenAPI document; and MCP for hosts
(`mcp.py`, `mcp_tools.py`, `mcp_tasks.py`), which makes the same `Call`s on every role's task service.

A binding turns its wire into a `Call` and runs an operation of `ops/`; it decides nothing about tasks. The
top floor: it may import every room but `endpoints/`, and no module of `api/` imports it (`app.main`,
`app.wiring` and `app.cli` mount and start it)."""
