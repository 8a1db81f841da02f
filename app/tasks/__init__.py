"""The task service: lifecycle, idempotency, context rules, event application."""
