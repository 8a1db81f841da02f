"""Agents: the public agent API (`app.agents.sdk`), the AgentEvent layer on it, and the built-ins."""
