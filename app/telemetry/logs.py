"""Logs: one line per record, as text or as a JSON object (`LOG_FORMAT`), with what is known of the request
or agent run it comes from, and secrets masked whatever a log call passes.

- **Context fields.** `scope(...)` starts the fields of a request (the edge, `api/edge/observe.py`) or of a
  run (the runner, the push deliverer); `bind(...)` adds to them as they become known (the principal at the
  guard, the role where the call is built, the task and context ids in the task service). The fields are one
  dict per request or run, held in a context variable, so a record logged anywhere below (uvicorn's access
  line included, which is logged as the answer starts) carries them. The principal is never logged, only the
  first 12 hex digits of its sha256 (the prefix of its workspace folder's name). The trace and span ids come
  from the current span (`traces.current_ids`), when tracing is on.
- **Redaction** (`Redact`, a filter on the one handler every logger ends at). Each record's message and
  traceback are rewritten before they are formatted: the values of `Authorization`, `X-API-Key`, tokens,
  `credentials`, passwords and secrets, given as headers, `key: value`, `key=value` or quoted pairs (JSON,
  Python reprs); any `Bearer` token; anything shaped like a JWT; and every value of the agents' environment
  the operator configured (`add_secrets`: AGENT_ENV, the passthrough variables, each role's `env`). A log
  call that passes a header dict or a push config whole leaks none of them.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import time
from collections.abc import Iterable
from contextvars import ContextVar
from functools import lru_cache
from typing import IO, Any, Literal

import orjson

from . import traces

__all__ = ["JsonFormatter", "Redact", "TextFormatter", "add_secrets", "bind", "redact", "scope", "setup"]

CHATTY = ("httpx", "httpcore", "alembic.runtime.plugins")
"""Libraries whose info lines are one per call they make (or, alembic's, one per plugin it sets up when it
is imported): shown at `debug` only."""
FIELDS = ("task_id", "context_id", "role", "principal")
"""The context fields a record may carry, in the order they are printed."""

_fields: ContextVar[dict[str, str] | None] = ContextVar("a2a_log_fields", default=None)


@lru_cache(maxsize=4096)
def principal_hash(name: str) -> str:
    """What logs show of a principal: the first 12 hex digits of its name's sha256."""
    return hashlib.sha256(name.encode()).hexdigest()[:12]


def _clean(fields: dict[str, str | None]) -> dict[str, str]:
    out = {k: v for k, v in fields.items() if v}
    if "principal" in out:
        out["principal"] = principal_hash(out["principal"])
    return out


def scope(**fields: str | None) -> None:
    """Start new context fields for what this asyncio task (and the tasks it starts) does from now on: a
    request or a run. `principal` is given by name and kept hashed."""
    _fields.set(_clean(fields))


def bind(**fields: str | None) -> None:
    """Add fields to the current request's or run's (a new set if there is none): they show on every record
    logged for it from now on, by this task or any it shares them with."""
    current = _fields.get()
    if current is None:
        _fields.set(_clean(fields))
    else:
        current.update(_clean(fields))


def fields() -> dict[str, str]:
    """The current context fields."""
    return dict(_fields.get() or {})


# ---- redaction ---------------------------------------------------------------------------------------------

_NAMES = (
    r"authorization|proxy-authorization|x-api-key|api[-_]?key|apikey|x-a2a-notification-token"
    r"|a2a_worker_key|a2a_worker_token|credentials|token|access_token|refresh_token|id_token"
    r"|client_secret|password|passwd|secret"
)
_QUOTED = re.compile(rf"""(?i)(["'](?:{_NAMES})["']\s*[:,]\s*)(["'])((?:\\.|(?!\2).)*)\2""")
"""A secret-named key with a quoted value: JSON, a Python dict's or header tuple's repr."""
_PLAIN = re.compile(rf"""(?i)\b({_NAMES})(\s*[:=]\s*)((?:bearer|basic|token)\s+)?([^\s"',;&)}}\]]+)""")
"""A secret-named header or `key=value`: `Authorization: Bearer x`, `token=x`."""
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{4,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_HINTS = ("token", "key", "auth", "secret", "passw", "credential", "bearer", "eyj")
"""A cheap first look: case-folded text without any of these needs no rewriting (the usual record). Each
name of `_NAMES`, `Bearer` and a JWT's `eyJ` holds one of them; substring tests of the folded text are
several times cheaper than one case-insensitive search of the alternatives, which cost an access line half
its time."""
MASK = "***"
MIN_SECRET = 8
"""Configured values shorter than this are not masked (a `1` or `true` would mask half of every line)."""

_secrets: set[str] = set()
_secrets_re: re.Pattern[str] | None = None


def add_secrets(values: Iterable[str]) -> None:
    """Mask these values wherever they appear in a record (the agents' environment); short ones are not."""
    global _secrets_re
    new = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET} - _secrets
    if not new:
        return
    _secrets.update(new)
    alternatives = sorted(_secrets, key=len, reverse=True)
    _secrets_re = re.compile("|".join(re.escape(v) for v in alternatives))


def redact(text: str) -> str:
    """`text` with every secret it shows masked."""
    if _secrets_re is not None:
        text = _secrets_re.sub(MASK, text)
    folded = text.casefold()
    if not any(hint in folded for hint in _HINTS):
        return text
    text = _QUOTED.sub(lambda m: f"{m[1]}{m[2]}{MASK}{m[2]}", text)
    text = _PLAIN.sub(lambda m: f"{m[1]}{m[2]}{m[3] or ''}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)
    return _JWT.sub(MASK, text)


class Redact(logging.Filter):
    """Rewrites each record's message (its arguments merged in) and traceback with `redact`, before any
    formatter sees it; uvicorn's access line keeps its parts as fields (`http`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _version, status = record.args
            record.http = {"method": method, "path": redact(str(path)), "status": status, "client": client}
        message = record.getMessage()
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


# ---- formats -----------------------------------------------------------------------------------------------


def _context(record: logging.LogRecord) -> dict[str, str]:
    out = dict(_fields.get() or {})
    ids = traces.current_ids()
    if ids is not None:
        out["trace_id"], out["span_id"] = ids
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ms), level, logger, message, replica, the context fields known,
    `trace_id`/`span_id` under a span, `http` for an access line, `exception` with a traceback."""

    def __init__(self, replica: str) -> None:
        super().__init__()
        self.replica = replica

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "replica": self.replica,
        }
        out.update(_context(record))
        http = getattr(record, "http", None)
        if http is not None:
            out["http"] = http
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self.formatException(record.exc_info))
        if record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message [task=… context=… role=… principal=… trace=…]`."""

    SHORT = {"task_id": "task", "context_id": "context", "role": "role", "principal": "principal"}

    def __init__(self, replica: str) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.replica = replica

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        context = _context(record)
        tags = [f"{self.SHORT[k]}={context[k]}" for k in FIELDS if k in context]
        if "trace_id" in context:
            tags.append(f"trace={context['trace_id']}")
        return f"{line} [{' '.join(tags)}]" if tags else line


@lru_cache(maxsize=4)
def _second(seconds: int) -> str:
    """A second's ISO text, made once for every record of that second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def _iso(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


Format = Literal["auto", "text", "json"]


def resolve(fmt: str, stream: IO[str]) -> Literal["text", "json"]:
    """`auto`: text on a terminal, JSON otherwise (a container's log, a file)."""
    if fmt == "auto":
        isatty = getattr(stream, "isatty", None)
        return "text" if isatty is not None and isatty() else "json"
    return "json" if fmt == "json" else "text"


def setup(level: str, fmt: str, replica: str, stream: IO[str] | None = None) -> logging.Handler:
    """Every record, ours and the libraries' (uvicorn's access line too), through one handler on stderr:
    redacted, then formatted as `fmt` says; the root logger at `level`. Python warnings become records."""
    stream = stream or sys.stderr
    # No formatter here prints where a call was made, or its thread or process: not looking them up saves
    # a record a third of its making (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(stream)
    formatter = JsonFormatter(replica) if resolve(fmt, stream) == "json" else TextFormatter(replica)
    handler.setFormatter(formatter)
    handler.addFilter(Redact())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    # Library chatter (httpx logs each request it makes at info: a remote worker's every claim, batch and
    # long poll) only when asked for with `debug`; its warnings and errors always.
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)
    logging.captureWarnings(True)
    return handler
