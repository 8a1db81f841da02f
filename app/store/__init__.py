"""Persistence: SQLAlchemy models, the repository, and the group-commit writer."""
