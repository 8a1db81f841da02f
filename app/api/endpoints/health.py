"""Liveness (`/healthz`) and readiness (`/readyz`: database migrated for this code, bus reachable).

`/healthz` never touches the database, so a replica stays alive (not restarted) through a database
outage, while `/readyz` answers 503 within `READY_TIMEOUT_S` so a load balancer stops sending it calls.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.store import migrations

from ..deps import components
from ..faults import requests_outage

router = APIRouter()


def head_revision() -> str | None:
    """The newest alembic revision shipped with this code."""
    return migrations.script().get_current_head()


@lru_cache
def _known_revisions() -> frozenset[str]:
    return frozenset(r.revision for r in migrations.script().walk_revisions())


def migration_gap(current: str | None) -> str | None:
    """Why this code cannot serve a database at migration `current`, or None when it can.

    At this code's head it can; at a revision of its own before the head it cannot (run the migrations). A
    revision it does not know is a later release's: migrations only expand from one release to the next
    (docs/operations.md, "Upgrades without downtime"), so this release keeps serving while the next is rolled
    out, and again after a rollback."""
    head = head_revision()
    if current == head:
        return None
    if current is None or current in _known_revisions():
        return f"database at migration {current}, this code needs {head}: run the migrations"
    return None


@router.get("/healthz", include_in_schema=False)
async def healthz(request: Request) -> JSONResponse:
    """Alive, with what an operator wants at a glance: this replica, the agents it runs now, and its
    webhook delivery counters since start (attempts, delivered, retried, failed, refused, in flight)."""
    c = components(request)
    return JSONResponse(
        {
            "status": "ok",
            "replica": c.replica_id,
            "runningAgents": c.running,
            "push": c.deliverer.stats(),
        }
    )


READY_TIMEOUT_S = 3.0
"""Longest a readiness check waits for the database or Redis."""


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    try:
        async with asyncio.timeout(READY_TIMEOUT_S), components(request).engine.connect() as conn:
            current = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    except Exception as exc:
        return _unready(f"database not reachable or not migrated: {type(exc).__name__}")
    requests_outage.ok()
    gap = migration_gap(current)
    if gap is not None:
        return _unready(gap)
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await components(request).bus.ping()
    except Exception as exc:
        return _unready(f"redis not reachable: {type(exc).__name__}")
    return JSONResponse({"status": "ok"})


def _unready(reason: str) -> JSONResponse:
    return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
