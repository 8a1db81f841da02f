"""What an exception no handler expected becomes on the wire.

A database that is away (a restart, an outage) is not a bug: the client gets a clean, retryable error
that names the cause (JSON-RPC -32603, HTTP 503 with `Retry-After`), logged once per outage rather than
once per request. Anything else is an internal error, logged with its traceback.
"""

from __future__ import annotations

import logging

from app.protocol.errors import A2AError, DatabaseUnavailableError, InternalError
from app.store.outage import OutageLog, is_unavailable

log = logging.getLogger(__name__)

requests_outage = OutageLog("requests (answering 503)")


def unexpected(exc: BaseException, where: str) -> A2AError:
    """The wire error for `exc`, raised while serving `where`."""
    if is_unavailable(exc):
        requests_outage.failed(exc)
        return DatabaseUnavailableError()
    log.error("internal error in %s", where, exc_info=exc)
    return InternalError()
