"""Fixtures of the store's tests."""

from __future__ import annotations

import pytest

from app.store import sqlite_hops


@pytest.fixture
def trips(monkeypatch):
    """The calls made in aiosqlite's threads, by name."""
    made: list[str] = []
    original = sqlite_hops.Connection._execute

    async def counted(self, fn, *args, **kwargs):
        made.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(sqlite_hops.Connection, "_execute", counted)
    return made
