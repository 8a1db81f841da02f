"""Telling a database that is away from a bug, and logging an outage once instead of once per attempt.

While PostgreSQL restarts or is down, every query fails in one of a few ways: the connect is refused or
times out, a pooled connection turns out closed, the server says it is shutting down or starting up, or
the driver's protocol state is broken by the lost connection. Callers that can wait (a run's commits, the
background loops, stream readers) retry those with backoff; callers that answer a client turn them into a
clean "database unavailable" error. Anything else is a bug and is logged as one.
"""

from __future__ import annotations

import logging
import sqlite3
import time

import asyncpg
from sqlalchemy.exc import (
    DBAPIError,
    InterfaceError,
    InternalError as SAInternalError,
    OperationalError,
    TimeoutError as PoolTimeoutError,
)

log = logging.getLogger(__name__)

_SQLSTATE_CLASSES = ("08", "53", "57")
"""Connection exception, insufficient resources (too many connections), operator intervention (admin
shutdown, crash shutdown, cannot connect now: starting up or shutting down)."""


_SQLITE_AWAY = ("locked", "busy", "unable to open", "disk i/o")

_CONTENTION = ("40P01", "40001")
"""Deadlock detected, serialization failure: PostgreSQL aborted the transaction to let another go on."""


def is_unavailable(exc: BaseException) -> bool:
    """True when `exc` means the database could not be reached or lost the connection, not that the
    statement was wrong: retrying later may succeed."""
    if isinstance(exc, OSError | TimeoutError | PoolTimeoutError):
        return True
    if isinstance(exc, OperationalError) and isinstance(exc.orig, sqlite3.Error):
        # SQLite says OperationalError for a missing table too; only a busy or unreadable file passes.
        return any(m in str(exc.orig).lower() for m in _SQLITE_AWAY)
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    # Raised by asyncpg itself, not through SQLAlchemy (the writer's one-statement path, `steps`).
    if isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, ValueError):
        return True  # the connection is closed, or a statement broke off under it; not bad arguments
    if isinstance(exc, asyncpg.InternalClientError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        return str(exc.sqlstate or "")[:2] in _SQLSTATE_CLASSES
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        state = str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")
        if state[:2] in _SQLSTATE_CLASSES:
            return True
        # asyncpg's "another operation is in progress" after a connection died under a statement.
        if isinstance(exc, SAInternalError) and "InternalClientError" in type(orig).__name__:
            return True
        cause = getattr(orig, "__cause__", None)
        if isinstance(cause, OSError | TimeoutError):
            return True
    return False


def is_contention(exc: BaseException) -> bool:
    """True when PostgreSQL aborted `exc`'s transaction whole because of another one (a deadlock between
    two writers of one task): the same transaction, tried again, is expected to pass."""
    seen: BaseException | None = exc
    for _ in range(4):  # SQLAlchemy's error, its adapted driver error, asyncpg's own
        if seen is None:
            return False
        if str(getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None) or "") in _CONTENTION:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


class OutageLog:
    """One warning when `what` first fails because the database is away, one when it works again.

    A loop or path calls `failed(exc)` on each failed attempt and `ok()` after each success; an outage
    of any length costs two log lines per user of this class, not one per attempt. A user that only sees
    failures (requests) starts a new outage after `quiet_s` without one.
    """

    def __init__(self, what: str, quiet_s: float = 60.0) -> None:
        self.what = what
        self.since: float | None = None
        self._last = 0.0
        self._quiet_s = quiet_s

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        if self.since is not None and now - self._last > self._quiet_s:
            self.since = None
        self._last = now
        if self.since is None:
            self.since = now
            log.warning(
                "%s: the database is unreachable (%s: %s); retrying until it is back",
                self.what,
                type(exc).__name__,
                str(exc).splitlines()[0][:200] if str(exc) else "",
            )

    def failed_or_bug(self, exc: BaseException, logger: logging.Logger, bug: str, *args: object) -> bool:
        """`failed(exc)` when the database is away (True); anything else is a bug, logged by `logger` as
        `bug % args` with its traceback (False)."""
        if is_unavailable(exc):
            self.failed(exc)
            return True
        logger.error(bug, *args, exc_info=exc)
        return False

    def ok(self) -> None:
        if self.since is not None:
            log.warning("%s: the database is reachable again after %.1f s", self.what, self.down_for())
            self.since = None

    def down_for(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since


def backoff(delay: float, cap: float = 1.0) -> float:
    """The next retry delay: doubled, capped (a second at most: recovery is noticed within it)."""
    return min(delay * 2, cap)
