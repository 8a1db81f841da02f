"""Agent adapters and the agent API. Imports only protocol's domain types."""

from .base import Agent, AgentEvent, AgentEventKind, AgentRequest, AgentRun, Skill

__all__ = ["Agent", "AgentEvent", "AgentEventKind", "AgentRequest", "AgentRun", "Skill"]
