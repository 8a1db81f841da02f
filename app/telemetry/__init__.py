"""Logs and traces: `logs` (one line per record, text or JSON, with the request's or run's context fields and
secrets masked) and `traces` (OpenTelemetry spans, exported over OTLP/HTTP when an endpoint is set, and
nothing at all when not). Imports nothing of ours, so every room may use it."""
