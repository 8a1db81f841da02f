"""The admin command line, run by an operator against `DATABASE_URL` (and `REDIS_URL`, when the replicas
share one): `a2a-server prune` (tasks, then this machine's workspaces) and `a2a-server tasks
list|show|tail|cancel` (docs/operations.md "Admin command line"). A readable table on a terminal, JSON
with `--json`.

Reads go to the database directly, whoever owns the task. `tasks cancel` writes the way a replica does:
it builds the task's role as a replica does (`wiring.role_parts` and `wiring.role_stack`, on the bus from
`REDIS_URL`, with an executor that runs no agents) under a name of its own (`admin:<host>:<pid>`) and calls
`TaskService.cancel`, so a task running on a replica is canceled there, over the bus, and its agent stopped.
A holder it cannot reach (no `REDIS_URL`, or a replica that does not answer) has its lease taken over
(`take_over`): the cancel is written here, and the holder stops its agent at its next commit (its event
number is taken) or heartbeat (its lease is no longer its own). `tasks tail` follows the event log: it
reads the events after the last one printed whenever the bus rings (with `REDIS_URL`), and every
`TAIL_POLL_S` anyway.

It imports the stores it reads, and `app.wiring` (the app's assembly, the one place besides this package that
assembles roles and stores) only in the commands that build a role, a bus or the sweep: `list` and `show`
start in a fraction of the time. How it prints is `render.py`.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta
from typing import Any, TextIO

from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol import protojson_v10
from app.protocol.errors import A2AError
from app.protocol.events import StatusUpdate
from app.protocol.model import TERMINAL_STATES, Message, Task, TaskState, iso, parse_iso, utcnow
from app.settings import SettingError, Settings
from app.store.admin import AdminReads, TaskRecord
from app.store.browse import Browse, Filters
from app.store.db import create_engine
from app.store.repo import Repository
from app.store.retention import TABLES, Pruning
from app.store.writer import SeqTakenError
from app.tasks.control import UnreachableHolderError

from .render import cut, event_json, event_line, message_text, show_text, table, when, write_json, write_line

ADMIN_REASON = "Task canceled by an administrator"
TAIL_POLL_S = 0.5
"""How often `tasks tail` reads the log when no doorbell rings (always, without REDIS_URL)."""
LIST_LIMIT = 50
CANCEL_TRIES = 3
"""A cancel whose commit collides with the holder's (it wrote an event meanwhile) is made again."""

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


class AdminError(Exception):
    """A one-line error for the operator (exit status 1)."""


def parse_age(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s`, `2w`; a bare number is days."""
    m = _AGE.match(text)
    if m is None:
        raise AdminError(f"{text!r} is not an age: a number with s, m, h, d or w (e.g. 30d)")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def parse_since(text: str) -> str:
    """An age (`2h`: that long ago) or an ISO-8601 time, as the tasks' status times are written."""
    try:
        return iso(utcnow() - parse_age(text))
    except AdminError:
        pass
    try:
        return iso(parse_iso(text))
    except ValueError:
        raise AdminError(f"--since {text!r} is neither an age (2h, 7d) nor an ISO-8601 time") from None


def parse_state(text: str) -> TaskState:
    value = text.strip().lower().replace("_", "-").removeprefix("task-state-")
    try:
        return TaskState(value)
    except ValueError:
        names = ", ".join(s.value for s in TaskState if s is not TaskState.UNKNOWN)
        raise AdminError(f"--state {text!r} is not a task state ({names})") from None


# ---- the parts ------------------------------------------------------------------------------------


@asynccontextmanager
async def _engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(settings.database_url, settings.db_timeout_s, settings.db_statement_timeout_s)
    try:
        yield engine
    finally:
        await engine.dispose()


def admin_id() -> str:
    """This command's name where a replica's would be (leases, control messages)."""
    return f"admin:{socket.gethostname()}:{os.getpid()}"


async def _record(engine: AsyncEngine, task_id: str) -> TaskRecord:
    found = await AdminReads(engine).find(task_id)
    if found is None:
        raise AdminError(f"task {task_id} not found")
    return found


# ---- prune ----------------------------------------------------------------------------------------


async def prune(settings: Settings, older_than: timedelta, dry_run: bool, as_json: bool, out: TextIO) -> None:
    """Delete (or with `dry_run`, count) the tasks that ended more than `older_than` ago, as the retention
    pass does, then sweep this machine's workspaces the same way (`agents/cli/sweep.py`); print the rows
    per table and the disk freed."""
    cutoff = utcnow() - older_than
    async with _engine(settings) as engine:
        pruning = Pruning(engine, settings.retention_batch)
        if dry_run:
            counts = await pruning.count(cutoff)
        else:
            waited = False
            while True:
                async with pruning.turn() as mine:
                    if mine:
                        counts = await pruning.prune(cutoff)
                        break
                if not waited:
                    print("another process is pruning (a replica's pass); waiting for it", file=sys.stderr)
                    waited = True
                await asyncio.sleep(1.0)
        swept = None
        if not settings.agent_repo_path:
            from app.wiring import sweep_of

            swept = await sweep_of(settings, pruning.contexts).run_once(cutoff, dry_run)
    rows = {t: counts[t] for t in TABLES if not (dry_run and t == "task_counts")}
    workspaces = None
    if swept is not None:
        workspaces = {
            "removed": swept.removed,
            "freedBytes": swept.freed_bytes,
            "keptRefs": swept.kept_refs,
            "keptRefsPruned": swept.kept_refs_pruned,
            "busy": swept.busy,
            "left": swept.workspaces,
            "leftBytes": swept.workspace_bytes,
            "unmarked": swept.unmarked,
        }
    if as_json:
        write_json({"cutoff": iso(cutoff), "dryRun": dry_run, "rows": rows, "workspaces": workspaces}, out)
        return
    verb = "would be deleted" if dry_run else "deleted"
    out.write(f"tasks that ended before {when(cutoff)}: {rows['tasks']} {verb}\n")
    table(["table", "rows"], [[t, str(n)] for t, n in rows.items()], out)
    out.write("task_usage rows are kept (the account of usage, GET /usage).\n")
    if swept is None:
        out.write("workspaces: none swept (AGENT_REPO_PATH is the operator's folder)\n")
        return
    verb = "would be removed" if dry_run else "removed"
    freed = "would free" if dry_run else "freed"
    out.write(
        f"workspaces of ended contexts on this machine: {swept.removed} {verb}, "
        f"{swept.freed_bytes} bytes {freed} ({_size(swept.freed_bytes)})\n"
    )
    if not dry_run and (swept.kept_refs or swept.kept_refs_pruned):
        out.write(
            f"their branches kept in the repository cache: {swept.kept_refs}; "
            f"kept branches pruned: {swept.kept_refs_pruned}\n"
        )
    out.write(
        f"workspaces left: {swept.workspaces} ({_size(swept.workspace_bytes)}), "
        f"in use by a run: {swept.busy}, unmarked (never removed): {swept.unmarked}\n"
    )


def _size(n: int) -> str:
    """Bytes for a person: 1.5 MiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# ---- tasks list / show ----------------------------------------------------------------------------


async def tasks_list(settings: Settings, filters: Filters, limit: int, as_json: bool, out: TextIO) -> None:
    """The tasks matching `filters`, newest status first, at most `limit`."""
    lines = []
    async with _engine(settings) as engine:
        browse = Browse(engine)
        cursor: str | None = None
        while len(lines) < limit:
            page = await browse.page(filters, limit=limit - len(lines), cursor=cursor)
            lines.extend(page.lines)
            cursor = page.next_cursor
            if not cursor:
                break
    if as_json:
        write_json(
            [
                {
                    "id": t.id,
                    "state": t.state,
                    "role": t.role,
                    "owner": t.owner,
                    "contextId": t.context_id,
                    "statusAt": t.status_at,
                    "createdAt": t.created_at,
                    "title": t.title,
                }
                for t in lines
            ],
            out,
        )
        return
    table(
        ["ID", "STATE", "ROLE", "OWNER", "CONTEXT", "UPDATED", "TITLE"],
        [
            [
                t.id,
                t.state,
                t.role,
                cut(t.owner, 20),
                cut(t.context_id, 24),
                when(t.status_at),
                cut(t.title, 48),
            ]
            for t in lines
        ],
        out,
    )
    if not lines:
        out.write("(no tasks)\n")


async def tasks_show(settings: Settings, task_id: str, as_json: bool, out: TextIO) -> None:
    """One task whole: status, history, artifacts, transitions, lease, push deliveries, usage."""
    async with _engine(settings) as engine:
        found = await Browse(engine).task(task_id, None)
        if found is None:
            raise AdminError(f"task {task_id} not found")
        reads = AdminReads(engine)
        record = await _record(engine, task_id)
        deliveries = await reads.deliveries(task_id)
        usage = await reads.usage(task_id)
    task = found[0].task
    now = utcnow()
    lease = None
    if record.lease_owner is not None:
        lease = {
            "holder": record.lease_owner,
            "expiresAt": record.lease_expires_at,
            "expired": record.lease_expires_at is not None and record.lease_expires_at < now,
            "suspectAt": record.lease_suspect_at,
        }
    if as_json:
        write_json(
            {
                "task": protojson_v10.encode_task(task),
                "owner": record.owner,
                "role": record.role,
                "lastSeq": record.last_seq,
                "createdAt": iso(record.created_at),
                "updatedAt": iso(record.updated_at),
                "lease": lease,
                "push": [
                    {
                        "configId": d.config_id,
                        "url": d.url,
                        "version": d.version,
                        "delivered": d.delivered,
                        "failed": d.failed,
                        "attempts": d.attempts,
                        "pending": d.pending,
                        "lastOutcome": d.last_outcome,
                        "lastAttemptAt": d.last_attempt_at,
                        "lastDeliveredAt": d.last_delivered_at,
                        "claimedBy": d.claimed_by,
                    }
                    for d in deliveries
                ],
                "usage": {"rows": usage, "sum": (task.metadata or {}).get("usage")},
            },
            out,
        )
        return
    show_text(task, record, lease, deliveries, usage, out)


# ---- tasks tail -------------------------------------------------------------------------------------


async def tasks_tail(settings: Settings, task_id: str, lines: int, as_json: bool, out: TextIO) -> None:
    """Print the task's last `lines` events, then each new one as it is committed, until the task ends."""
    from app.wiring import start_bus

    async with _engine(settings) as engine, AsyncExitStack() as stack:
        record = await _record(engine, task_id)
        repo = Repository(engine)
        bus = await start_bus(settings, admin_id(), stack) if settings.redis_url else None
        sub = await bus.subscribe(task_id) if bus is not None else None
        after = max(0, record.last_seq - lines) if lines >= 0 else 0
        ended = TaskState(record.state) in TERMINAL_STATES
        while True:
            for r in await repo.events_after(task_id, record.context_id, after, owner=record.owner):
                if as_json:
                    write_line(event_json(r), out)
                else:
                    out.write(event_line(r) + "\n")
                    out.flush()
                after = r.seq
                if isinstance(r.event, StatusUpdate) and r.event.status.state.terminal:
                    ended = True
            if ended:
                return
            if sub is None:
                await asyncio.sleep(TAIL_POLL_S)
                continue
            with suppress(TimeoutError):
                async with asyncio.timeout(TAIL_POLL_S * 4):
                    await sub.get()  # a doorbell (or a resync): the log says what is new


# ---- tasks cancel ---------------------------------------------------------------------------------


class _Bystander:
    """The executor of the admin's task service: it runs no agents (a cancel stops the run where it is)."""

    pure = False

    def reserve(self) -> bool:
        return False

    def release_slot(self) -> None:
        return None

    def start(self, task_id: str, reserved: bool = False) -> None:
        raise RuntimeError("the admin command line runs no agents")

    async def stop(self, task_id: str) -> None:
        return None

    def lost(self, task_id: str) -> None:
        return None

    async def answer(self, task_id: str, message: Message) -> None:
        return None

    async def reply(self, owner: str, message: Message) -> Message | None:
        return None


async def tasks_cancel(settings: Settings, task_id: str, reason: str, as_json: bool, out: TextIO) -> None:
    """Cancel the task as a client's cancel would be, where it is written (see the module's docstring)."""
    from app import roles as roles_
    from app.wiring import role_parts, role_stack, start_bus, start_writer

    async with _engine(settings) as engine, AsyncExitStack() as stack:
        record = await _record(engine, task_id)
        try:
            several = len(roles_.load(settings)) > 1
        except SettingError as exc:
            raise AdminError(f"invalid setting {exc.name}: {exc}") from None
        bus = await start_bus(settings, admin_id(), stack)
        parts = role_parts(settings, engine, start_writer(engine, stack), bus, record.role, several=several)
        tasks, _, service = role_stack(parts, lambda _: _Bystander(), settings, engine)
        stack.push_async_callback(tasks.notices.sent)
        expires = record.lease_expires_at
        holder = record.lease_owner if expires is not None and expires >= utcnow() else None
        how = "here" if holder is None else f"by {holder}, which held it"
        take_over = False
        task: Task | None = None
        failure = f"task {task_id} kept changing as it was canceled; try again"
        try:
            for _ in range(CANCEL_TRIES):
                try:
                    task = await service.cancel(
                        record.owner, task_id, reason=reason, take_over=take_over, take_over_unheard=False
                    )
                    break
                except UnreachableHolderError:
                    take_over = True
                    how = (
                        f"here: {holder} holding it could not be reached"
                        + ("" if settings.redis_url else " without REDIS_URL")
                        + "; its lease was taken over, and it stops the agent at its next commit or heartbeat"
                    )
                except SeqTakenError:
                    pass  # its holder wrote an event meanwhile: again, on the task as it now stands
                except A2AError as exc:
                    failure = exc.message
                    break
        finally:
            if task is None:
                await tasks.release([task_id])  # a lease taken here goes back (nothing if none was)
        if task is None:
            raise AdminError(failure)
    if as_json:
        write_json({"task": protojson_v10.encode_task(task), "canceled": how}, out)
        return
    out.write(f"task {task.id}: {task.status.state.value} ({how})\n")
    if task.status.message is not None:
        out.write(f"message: {message_text(task.status.message)}\n")


def run(coro: Any) -> None:
    """Run one command; an `AdminError` is one line on stderr and exit status 1, Ctrl-C exit status 130."""
    try:
        asyncio.run(coro)
    except AdminError as exc:
        sys.exit(f"error: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = [
    "ADMIN_REASON",
    "AdminError",
    "parse_age",
    "parse_since",
    "parse_state",
    "prune",
    "run",
    "tasks_cancel",
    "tasks_list",
    "tasks_show",
    "tasks_tail",
]
