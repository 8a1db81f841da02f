"""Cost that does not grow with the data: the same requests against an empty database and a grown one.

Two fresh PostgreSQL databases, each served by `a2a-server serve` (scripted agent, one worker). The same
probe tasks are made on both through the API: a 5-event-ish normal task, a long session (about 20,000
events: text chunks and tool updates), and 60 tasks in the context `big-context`. The grown database then
gets, with set-based SQL copying the rows the service wrote for template tasks (so they are exactly as the
service writes them): `--tasks` finished tasks over `--owners` owners, a tenth of them the probe owner's
(the anonymous principal), `--context` of those in `big-context`, and `--long` more long sessions.

Each operation runs for `--duration` seconds at c=1 and c=16 against both servers, alternately, and the
table gives p50/p99 (ms) and req/s, and the ratio grown/empty of p50 and of req/s (for req/s: empty/grown,
so above 1 is slower too). Targets: every ratio at most 1.3; resubscribe near the end of the long session
within 2x of the same call on the normal task (on the grown database).

    python -m bench.scale [--tasks 1000000] [--quick] [--duration 5] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.servers import OurServer, _dsn, create_database, drop_database

V10 = {"A2A-Version": "1.0"}
CONTEXT = "big-context"
MAX_CONCURRENCY = 16
"""The most clients a point runs (c=1 and c=16)."""
NORMAL_SCRIPTS = [
    "say:hello;say:world",
    "say:hello;say:world",
    "say:hello",
    "tool:Read;say:done",
    "tool:Grep",
]
LONG_SCRIPT = "chunks:9996;" + ";".join(["tool:Read"] * 5000)
"""About 20,000 events: 9,996 text chunks and 10,000 tool updates (each a status message in the history)."""


class ScriptedServer(OurServer):
    def env(self) -> dict[str, str]:
        return {**super().env(), "AGENT_ADAPTER": "scripted", "BLOCKING_TIMEOUT_S": "120"}


def rpc(method: str, params: Any, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


@dataclass
class Probe:
    """What the measured requests name on one server."""

    normal: str
    normal_seq: int
    long: str
    long_seq: int
    later_token: str


async def send(c: httpx.AsyncClient, text: str, **fields: Any) -> dict[str, Any]:
    resp = await c.post("/a2a/jsonrpc", json=rpc("message/send", {"message": message(text, **fields)}))
    body = resp.json()
    assert "result" in body, body
    return body["result"]


async def last_seq(url: str, task_id: str) -> int:
    conn = await asyncpg.connect(_dsn(url))
    try:
        return int(await conn.fetchval("SELECT last_seq FROM tasks WHERE id = $1", task_id))
    finally:
        await conn.close()


async def finished(c: httpx.AsyncClient, task_id: str) -> None:
    """Wait for a task to complete (a blocking send may return first on a long run)."""
    for _ in range(1200):
        got = await c.post("/a2a/jsonrpc", json=rpc("tasks/get", {"id": task_id, "historyLength": 0}))
        if got.json()["result"]["status"]["state"] == "completed":
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"task {task_id} did not complete")


async def seed(server: OurServer) -> tuple[list[str], str, str]:
    """The probe tasks, made through the API: (normal template ids, the normal probe, the long session)."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as c:
        templates = [(await send(c, s))["id"] for s in NORMAL_SCRIPTS]
        long = (await send(c, LONG_SCRIPT))["id"]
        await finished(c, long)
        for _ in range(60):
            await send(c, "say:in context", contextId=CONTEXT)
        normal = (await send(c, "say:hello;say:world"))["id"]
    return templates, normal, long


async def find_seeds(url: str) -> tuple[list[str], str, str]:
    """The probe tasks of a kept database: a short finished task and the long session made through the API."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        mine = "owner = 'anonymous' AND id NOT LIKE 'bulk-%' AND id NOT LIKE 'long-%' AND state = 'completed'"
        normal = await conn.fetchval(
            f"SELECT id FROM tasks WHERE {mine} AND last_seq < 10 ORDER BY created_at LIMIT 1"
        )
        long = await conn.fetchval(f"SELECT id FROM tasks WHERE {mine} AND last_seq > 10000 LIMIT 1")
    finally:
        await conn.close()
    return [], normal, long


async def probe(server: OurServer, normal: str, long: str) -> Probe:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as c:
        token = ""
        for _ in range(2):
            page = (
                await c.post(
                    "/a2a/jsonrpc", json=rpc("ListTasks", {"pageSize": 20, "pageToken": token}), headers=V10
                )
            ).json()
            token = page["result"]["nextPageToken"]
    return Probe(
        normal,
        await last_seq(server.database_url, normal),
        long,
        await last_seq(server.database_url, long),
        token,
    )


REPLICATE = """
INSERT INTO tasks (id, context_id, owner, state, status, transitions, metadata, last_seq, created_at,
                   updated_at, status_at, lease_owner, lease_expires_at)
SELECT g.id, g.ctx, g.owner, t.state,
       replace(replace(replace(t.status::text, t.id, g.id), t.context_id, g.ctx), t.status_at, g.ts)::jsonb,
       t.transitions, t.metadata, t.last_seq, g.at, g.at, g.ts, NULL, NULL
FROM {gen} g JOIN tasks t ON t.id = g.tpl;
INSERT INTO messages (task_id, owner, message_id, role, body, created_at)
SELECT g.id, g.owner, g.id || '-' || m.id, m.role,
       replace(replace(replace(m.body::text, m.task_id, g.id), t.context_id, g.ctx), m.message_id,
               g.id || '-' || m.id)::jsonb, g.at
FROM {gen} g JOIN tasks t ON t.id = g.tpl JOIN messages m ON m.task_id = g.tpl ORDER BY g.i, m.id;
INSERT INTO events (task_id, seq, kind, body, created_at)
SELECT g.id, e.seq, e.kind, replace(replace(e.body::text, t.id, g.id), t.context_id, g.ctx)::jsonb, g.at
FROM {gen} g JOIN tasks t ON t.id = g.tpl JOIN events e ON e.task_id = g.tpl ORDER BY g.i, e.seq;
INSERT INTO artifacts (task_id, seq, artifact_id, append, body)
SELECT g.id, a.seq, replace(a.artifact_id, t.id, g.id), a.append,
       replace(replace(a.body::text, t.id, g.id), t.context_id, g.ctx)::jsonb
FROM {gen} g JOIN tasks t ON t.id = g.tpl JOIN artifacts a ON a.task_id = g.tpl;
INSERT INTO task_counts (owner, context_id, shard, n)
SELECT owner, c, 0, count(*) FROM (SELECT owner, '' AS c FROM {gen} UNION ALL SELECT owner, ctx FROM {gen}) x
GROUP BY owner, c
ON CONFLICT (owner, context_id, shard) DO UPDATE SET n = task_counts.n + excluded.n;
"""

TS = """to_char(timestamp '2026-01-01' - {i} * interval '1 second', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""


async def grow(url: str, args: argparse.Namespace, templates: list[str], long: str) -> None:
    """The grown shape, with SQL: finished tasks copied from the templates, then long sessions."""
    probe_tasks = args.tasks // 10
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.execute("SET synchronous_commit = off")
        await conn.execute(
            f"""
            CREATE UNLOGGED TABLE gen_bulk AS
            SELECT i, 'bulk-' || i AS id,
                   CASE WHEN i % 10 = 0 THEN 'anonymous'
                        ELSE 'owner-' || (i % {args.owners - 1}) END AS owner,
                   CASE WHEN i % 10 = 0 AND i / 10 <= {min(args.context, probe_tasks)} THEN '{CONTEXT}'
                        ELSE 'ctx-' || (i / 3) END AS ctx,
                   {TS.format(i="i")} AS ts,
                   timestamptz '2026-01-01 00:00:00+00' - i * interval '1 second' AS at,
                   ($1::text[])[1 + i % {len(templates)}] AS tpl
            FROM generate_series(1, {args.tasks}) i
            """,
            templates,
        )
        await conn.execute(
            f"""
            CREATE UNLOGGED TABLE gen_long AS
            SELECT i, 'long-' || i AS id, 'anonymous' AS owner, 'long-ctx-' || i AS ctx,
                   {TS.format(i="(i + 2000000000)")} AS ts,
                   timestamptz '2026-01-01 00:00:00+00' - i * interval '1 second' AS at, $1::text AS tpl
            FROM generate_series(1, {args.long}) i
            """,
            long,
        )
        for gen in ("gen_bulk", "gen_long"):
            started = time.monotonic()
            await conn.execute(REPLICATE.format(gen=gen))
            print(f"  {gen}: {time.monotonic() - started:.0f} s", flush=True)
        await conn.execute("DROP TABLE gen_bulk; DROP TABLE gen_long")
        started = time.monotonic()
        await conn.execute("VACUUM ANALYZE")
        print(f"  vacuum analyze: {time.monotonic() - started:.0f} s", flush=True)
        sizes = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM tasks) t, (SELECT count(*) FROM events) e, "
            "(SELECT count(*) FROM messages) m, pg_size_pretty(pg_database_size(current_database())) s"
        )
        print(
            f"  grown: {sizes['t']:,} tasks, {sizes['e']:,} events, {sizes['m']:,} messages, {sizes['s']}",
            flush=True,
        )
    finally:
        await conn.close()


EXPLAINED = {
    "ListTasks page": "SELECT * FROM tasks WHERE owner = 'anonymous' "
    "ORDER BY status_at DESC, id DESC LIMIT 21",
    "ListTasks by context": "SELECT * FROM tasks WHERE owner = 'anonymous' AND context_id = 'big-context' "
    "ORDER BY status_at DESC, id DESC LIMIT 21",
    "totalSize (counter)": "SELECT coalesce(sum(n), 0) FROM task_counts "
    "WHERE owner = 'anonymous' AND context_id = ''",
    "long: events after cursor": "SELECT seq, kind, body FROM events WHERE task_id = $1 AND seq > $2 - 2 "
    "AND task_id IN (SELECT id FROM tasks WHERE id = $1 AND owner = 'anonymous') ORDER BY seq",
    "long: last 10 messages": "SELECT body FROM (SELECT id, body FROM messages WHERE task_id = $1 "
    "ORDER BY id DESC LIMIT 10) m ORDER BY id",
    "long: artifacts": "SELECT seq, append, body FROM artifacts WHERE task_id = $1 ORDER BY seq",
}
"""The statements behind the measured reads (as the repository issues them), for `--explain`."""


async def explain(urls: dict[str, str], probes: dict[str, Probe]) -> None:
    """Shared buffers each statement touches on each database: the cost that must not grow."""
    print(f"\n{'statement (EXPLAIN ANALYZE, BUFFERS)':34} | {'empty':>13} | {'grown':>13}")
    conns = {k: await asyncpg.connect(_dsn(u)) for k, u in urls.items()}
    try:
        for name, sql in EXPLAINED.items():
            cells = []
            for k, conn in conns.items():
                args = [probes[k].long, probes[k].long_seq][: 2 if "$2" in sql else int("$1" in sql)]
                plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
                top = json.loads(plan)[0]
                buffers = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
                cells.append(f"{buffers:5} buf {top['Execution Time']:5.2f}ms")
            print(f"{name:34} | {cells[0]:>13} | {cells[1]:>13}")
    finally:
        for conn in conns.values():
            await conn.close()


Op = Callable[[httpx.AsyncClient, Probe], Awaitable[bool]]


def _ok(resp: httpx.Response) -> bool:
    return resp.status_code == 200 and "error" not in resp.json()


def jsonrpc(method: str, params: Callable[[Probe], Any], headers: dict[str, str] | None = None) -> Op:
    async def go(c: httpx.AsyncClient, p: Probe) -> bool:
        return _ok(await c.post("/a2a/jsonrpc", json=rpc(method, params(p)), headers=headers or {}))

    return go


def send_in_context() -> Op:
    """A send into the big context; concurrent ones into contexts of their own beside it, since the scripted
    agent (not `pure`) runs one open task per context (docs/protocol.md): at c=1 every send is into the big
    one, at c=16 one in 16."""
    free = [f"{CONTEXT}-{i}" for i in range(MAX_CONCURRENCY - 1, 0, -1)] + [CONTEXT]

    async def go(c: httpx.AsyncClient, p: Probe) -> bool:
        context = free.pop()
        try:
            body = rpc("message/send", {"message": message("say:hi", contextId=context)})
            return _ok(await c.post("/a2a/jsonrpc", json=body))
        finally:
            free.append(context)

    return go


def rest_list() -> Op:
    async def go(c: httpx.AsyncClient, p: Probe) -> bool:
        return (await c.get("/a2a/rest/tasks", params={"pageSize": 20})).status_code == 200

    return go


def resubscribe(which: str) -> Op:
    async def go(c: httpx.AsyncClient, p: Probe) -> bool:
        task, seq = (p.normal, p.normal_seq) if which == "normal" else (p.long, p.long_seq)
        body = rpc("tasks/resubscribe", {"id": task})
        async with c.stream(
            "POST", "/a2a/jsonrpc", json=body, headers={"Last-Event-ID": str(seq - 2)}
        ) as resp:
            data = await resp.aread()
        return resp.status_code == 200 and data.count(b"\nid: ") + data.startswith(b"id: ") == 2

    return go


OPS: dict[str, Op] = {
    "send (new context)": jsonrpc("message/send", lambda p: {"message": message("say:hi")}),
    "send (big context)": send_in_context(),
    "get (normal)": jsonrpc("tasks/get", lambda p: {"id": p.normal}),
    "get (long)": jsonrpc("tasks/get", lambda p: {"id": p.long, "historyLength": 10}),
    "list page 1": jsonrpc("ListTasks", lambda p: {"pageSize": 20}, V10),
    "list page 3": jsonrpc("ListTasks", lambda p: {"pageSize": 20, "pageToken": p.later_token}, V10),
    "list by context": jsonrpc("ListTasks", lambda p: {"pageSize": 20, "contextId": CONTEXT}, V10),
    "list REST": rest_list(),
    "resubscribe (normal)": resubscribe("normal"),
    "resubscribe (long)": resubscribe("long"),
}


@dataclass
class Point:
    p50: float
    p99: float
    rps: float
    bad: int


@dataclass
class Samples:
    latencies: list[float]
    elapsed: float = 0.0
    bad: int = 0

    def point(self) -> Point:
        lat = sorted(self.latencies)
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
        return Point(q[49], q[98], len(lat) / self.elapsed, self.bad)


async def measure(base_url: str, p: Probe, op: Op, concurrency: int, duration: float, into: Samples) -> None:
    """A closed loop of `concurrency` clients for `duration` seconds, added to `into`."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as c:
        await asyncio.gather(*(op(c, p) for _ in range(concurrency)))
        end = time.monotonic() + duration
        started = time.monotonic()

        async def worker() -> None:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                ok = await op(c, p)
                into.latencies.append((time.perf_counter() - t0) * 1000)
                into.bad += not ok

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        into.elapsed += time.monotonic() - started


async def compare(
    servers: dict[str, OurServer], probes: dict[str, Probe], op: Op, conc: int, args: argparse.Namespace
) -> dict[str, Point]:
    """Both databases in `--rounds` alternating slices (the order flips each round), so load from
    elsewhere on the machine falls on both alike."""
    samples = {k: Samples([]) for k in servers}
    order = list(servers)
    for _ in range(args.rounds):
        for k in order:
            await measure(servers[k].base_url, probes[k], op, conc, args.duration / args.rounds, samples[k])
        order.reverse()
    return {k: v.point() for k, v in samples.items()}


async def main(args: argparse.Namespace) -> int:
    base = os.environ.get("BENCH_POSTGRES_URL")
    if not base:
        print(
            "BENCH_POSTGRES_URL is not set: `make bench-scale` starts PostgreSQL and sets it", file=sys.stderr
        )
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    if args.reuse:
        urls = dict(zip(("empty", "grown"), args.reuse, strict=True))
    else:
        urls = {k: await create_database(base, f"a2a_scale_{k}") for k in ("empty", "grown")}
    servers = {k: ScriptedServer(k, u, work / f"{k}.log") for k, u in urls.items()}
    failed = 0
    try:
        probes: dict[str, Probe] = {}
        for srv in servers.values():
            srv.prepare()
            srv.start()
        if args.reuse:
            seeds = {k: await find_seeds(u) for k, u in urls.items()}
        else:
            print(f"seeding both servers through the API (logs in {work})", flush=True)
            seeds = {k: await seed(srv) for k, srv in servers.items()}
            print(
                f"growing: {args.tasks:,} tasks, {args.owners} owners, {args.long} long sessions", flush=True
            )
            servers["grown"].stop()
            templates, _, long = seeds["grown"]
            await grow(urls["grown"], args, templates, long)
            servers["grown"].start()
        for k, srv in servers.items():
            probes[k] = await probe(srv, seeds[k][1], seeds[k][2])
        await explain(urls, probes)
        print(
            f"\n{'operation':24} {'c':>3} | {'empty p50':>9} {'p99':>8} {'req/s':>7} | "
            f"{'grown p50':>9} {'p99':>8} {'req/s':>7} | {'p50 x':>6} {'req/s x':>7}"
        )
        results: dict[tuple[str, int], dict[str, Point]] = {}
        for name, op in OPS.items():
            if args.only and not any(o in name for o in args.only):
                continue
            for conc in (1, MAX_CONCURRENCY):
                pts = await compare(servers, probes, op, conc, args)
                results[(name, conc)] = pts
                e, g = pts["empty"], pts["grown"]
                r50, rr = g.p50 / e.p50, e.rps / g.rps
                mark = " " if max(r50, rr) <= 1.3 else "!"
                failed += e.bad + g.bad
                print(
                    f"{name:24} {conc:>3} | {e.p50:9.2f} {e.p99:8.2f} {e.rps:7.0f} | "
                    f"{g.p50:9.2f} {g.p99:8.2f} {g.rps:7.0f} | {r50:6.2f} {rr:7.2f}{mark}"
                    + (f"  ({e.bad + g.bad} bad answers)" if e.bad + g.bad else ""),
                    flush=True,
                )
        both = ("resubscribe (long)", 1) in results and ("resubscribe (normal)", 1) in results
        for conc in (1, MAX_CONCURRENCY) if both else ():
            long, normal = (
                results[("resubscribe (long)", conc)]["grown"],
                results[("resubscribe (normal)", conc)]["grown"],
            )
            print(
                f"resubscribe long/normal on the grown database, c={conc}: p50 x{long.p50 / normal.p50:.2f}"
            )
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {f"{n} c={c}": {k: vars(v) for k, v in pts.items()} for (n, c), pts in results.items()},
                    indent=1,
                )
            )
    finally:
        for srv in servers.values():
            srv.stop()
        if args.keep or args.reuse:
            print(f"kept: --reuse {urls['empty']} {urls['grown']}")
        else:
            for u in urls.values():
                await drop_database(base, u)
    return 1 if failed else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1_000_000, help="finished tasks in the grown database")
    ap.add_argument("--owners", type=int, default=1000)
    ap.add_argument("--context", type=int, default=6000, help="the probe owner's tasks in big-context")
    ap.add_argument("--long", type=int, default=50, help="long sessions (about 20,000 events each)")
    ap.add_argument(
        "--duration", type=float, default=5.0, help="seconds per operation, concurrency and database"
    )
    ap.add_argument("--quick", action="store_true", help="100,000 tasks, 10 long sessions, 2 s per point")
    ap.add_argument("--only", nargs="+", help="measure only operations whose name contains one of these")
    ap.add_argument("--rounds", type=int, default=4, help="alternating slices per point")
    ap.add_argument(
        "--keep", action="store_true", help="keep the two databases afterwards (prints their URLs)"
    )
    ap.add_argument(
        "--reuse", nargs=2, metavar=("EMPTY_URL", "GROWN_URL"), help="measure databases kept by --keep"
    )
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.long, args.duration = (
            min(args.tasks, 100_000),
            min(args.long, 10),
            min(args.duration, 2.0),
        )
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
