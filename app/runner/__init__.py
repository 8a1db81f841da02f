"""Runs agents for tasks: concurrency limit, timeouts, and the commits of what agents emit."""
