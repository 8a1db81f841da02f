"""Runs agents for tasks: concurrency limit, timeouts, the AgentEvent → A2A mapping."""
