"""Leases under chaos: no live replica's task is ended by another replica's reaper (issue 20).

A cluster of 3 replicas behind nginx, on a PostgreSQL and a Redis of this test alone (`own_services`), runs
streaming tasks of the scripted agent (105 to 300 chunks each, lasting longer than all the faults). Half
their clients follow over v0.3 JSON-RPC (`tasks/resubscribe`), half over v1.0 (`SubscribeToTask`), each
resuming by `Last-Event-ID` until the final event (tests/cluster/test_chaos_load.py's `Client`). Then, in
one run:

1. kill -9 of the busiest replica (most working tasks) and its restart under the same name;
2. Redis stopped and started again (empty);
3. PostgreSQL stopped for `CHAOS_PG_DOWN_S` and started again. While it is down another live replica that
   holds running tasks is frozen (SIGSTOP). Once PostgreSQL is back, the test waits until the other
   replicas' reapers have marked that replica's leases expired (`tasks.lease_suspect_at`), and only then
   thaws it (SIGCONT): the moment at which, before the fix, its tasks were reaped although it was alive.
   It must renew its leases and finish its tasks.

The variant run restarts a replica during the outage instead: it is killed while PostgreSQL is down, started
again while still down (it serves, unready, its recovery pending), and PostgreSQL comes back under it.

After each run: every task is terminal; each client saw exactly the task's event log after its snapshot;
each failed task was on the killed replica and its reason says so; every task of a live replica completed;
no replica still runs an agent (`runningAgents` in /healthz); no "Task exception was never retrieved" in a
log. The figures of each run are printed.

The CLI round: the replicas, each a machine of its own (its own AGENT_WORKSPACE_ROOT), run the `ndjson`
adapter with its fake CLI (tests/support/fakes/ndjson_agent.py `WORK`: writes `progress.txt`, then streams),
a checkpoint every second (CHECKPOINT_S=1) and LEASE_TTL_S 3. Its tasks are sent to the replicas in turn and
followed through nginx as above; once each has a checkpoint taken after its file (the `task_checkpoints`
row), the busiest replica is killed, its workspace root removed (its disk lost) and it is restarted under
its name: at once, or, every second run, once the reapers have handed its tasks on. Every task must end
`completed`: each of the killed replica's lists one attempt (`previous` "replica <id>") and its resumed run
(told "Your previous run of this task was interrupted") found `progress.txt` restored; each client saw the
task's event log after its snapshot exactly once, in order, with the hand-on's status; no replica still
runs an agent.

Sizes: by default (in `make test`) one run of each with 12 tasks and PostgreSQL down for 16 s, and one CLI
run of 6 tasks streaming 40 s; `make chaos` sets CHAOS_TASKS=60 CHAOS_RUNS=10 CHAOS_PG_DOWN_S=30
CHAOS_CLI_TASKS=18 CHAOS_CLI_RUNS=4 (CHAOS_VARIANT_RUNS, CHAOS_TASK_S, CHAOS_CLI_TASK_S also exist). Every
wait is on a condition; the only sleeps are the faults themselves (how long Redis and PostgreSQL stay down).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.agents.jail.sandbox import principal_key
from app.api.edge.auth import ANONYMOUS
from scripts.ready import log_tail
from tests.cli.test_cli_fakes import NDJSON
from tests.cluster.test_chaos_load import V10, Client, Figures, event_log, reason, rpc
from tests.cluster.test_sessions_survive import Machines
from tests.conftest import _fresh_pg_database
from tests.support.checkpoints import holds_files
from tests.support.clis import FAKES
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.rpc import text_message

TASKS = int(os.environ.get("CHAOS_TASKS", "12"))
RUNS = int(os.environ.get("CHAOS_RUNS", "1"))
VARIANT_RUNS = int(os.environ.get("CHAOS_VARIANT_RUNS", "1"))
PG_DOWN_S = float(os.environ.get("CHAOS_PG_DOWN_S", "16"))
"""Longer than two lease TTLs: every lease expires while PostgreSQL is down."""
TASK_S = float(os.environ.get("CHAOS_TASK_S", str(20 + 2 * PG_DOWN_S)))
"""How long each task streams: longer than all the faults of a run."""
LEASE_TTL_S = 8.0
"""Shorter than the outage, so every lease expires while PostgreSQL is down. Once it is back, a live replica
has one TTL after a reaper's mark to renew, while all three reconnect at once on a busy machine: a short TTL
would report its slow renewal as a live replica's task reaped (4 s did)."""
REDIS_DOWN_S = 2.0
MIN_CHUNKS, MAX_CHUNKS = 105, 300
CLI_TASKS = int(os.environ.get("CHAOS_CLI_TASKS", "6"))
"""The CLI round's tasks, sent to the replicas in turn: the killed one holds a third of them."""
CLI_RUNS = int(os.environ.get("CHAOS_CLI_RUNS", "1"))
CLI_TASK_S = float(os.environ.get("CHAOS_CLI_TASK_S", "40"))
"""How long each CLI task streams: longer than it takes every task to have its checkpoint."""
CLI_LINE_S = 0.25
CLI_LEASE_TTL_S = 3.0
"""No outage in the CLI round: a short TTL, so the killed replica's tasks are handed on within seconds."""


def chunked_script(chunks: int, seconds: float) -> str:
    """`chunks` single chunks spread over about `seconds`."""
    return ";".join(["chunks:1", f"sleep:{seconds / chunks:.3f}"] * chunks)


@dataclass
class LeaseFigures(Figures):
    failed_of_live: int = 0
    """Tasks ended although the replica running them never died."""
    agents_left: int = 0
    """Agents still running in a replica once every task has ended."""
    refused: int = 0
    """v1.0 resumes refused because the task had ended meanwhile (its events after the cursor unseen)."""

    def line(self) -> str:
        order = (
            "tasks completed failed failed_of_live stuck lost duplicated agents_left reconnects refused"
        ).split()
        return ", ".join(f"{k.replace('_', '-')} {getattr(self, k)}" for k in order)


async def fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def holders(dsn: str, ids: list[str], within: float = 120) -> dict[str, str]:
    """Each task's lease holder, once every one of them is `working` and held (a run started on it)."""
    async with asyncio.timeout(within):
        while True:
            rows = await fetch(
                dsn,
                "SELECT id, lease_owner FROM tasks WHERE id = ANY($1) AND state = 'working'"
                " AND lease_owner IS NOT NULL",
                ids,
            )
            if len(rows) == len(ids):
                return {r["id"]: r["lease_owner"] for r in rows}
            await asyncio.sleep(0.2)


async def working_by_owner(dsn: str) -> dict[str, list[str]]:
    """The working tasks by lease holder."""
    rows = await fetch(
        dsn,
        "SELECT id, lease_owner FROM tasks WHERE state = 'working' AND lease_owner IS NOT NULL ORDER BY id",
    )
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["lease_owner"], []).append(r["id"])
    return out


@dataclass
class Run:
    """One chaos run: its cluster, tasks and clients, and who was killed and who frozen."""

    name: str
    cl: Cluster
    dsn: str
    clients: list[Client]
    following: list[asyncio.Task[None]]
    owners: dict[str, str]
    """Each task's lease holder once all were working (before any fault)."""
    killed: int | None = None
    paused: int | None = None
    frozen: bool = False

    def index(self, replica_id: str) -> int:
        return next(r.index for r in self.cl.replicas if r.replica_id == replica_id)

    def busiest(self, by_owner: dict[str, list[str]], skip: int | None = None) -> int:
        """The replica holding the most working tasks (not `skip`)."""
        counts = {
            owner: len(ids) for owner, ids in by_owner.items() if skip is None or self.index(owner) != skip
        }
        assert counts and max(counts.values()) > 0, f"no replica holds working tasks: {by_owner}"
        return self.index(max(counts, key=lambda o: counts[o]))

    async def pause(self, i: int) -> None:
        self.paused = i
        await asyncio.to_thread(self.cl.pause, i)
        self.frozen = True

    async def resume(self) -> None:
        if self.frozen and self.paused is not None:
            await asyncio.to_thread(self.cl.resume, self.paused)
            self.frozen = False


async def start_run(services: OwnServices, workdir: Path, name: str) -> Run:
    """A new cluster on a fresh database, `TASKS` streaming tasks on it (half followed over v0.3, half over
    v1.0), all working and streaming to their clients."""
    db_url = await _fresh_pg_database(services.pg_url)
    dsn = db_url.replace("postgresql+asyncpg://", "postgresql://")
    cl = Cluster(
        db_url,
        services.redis_url,
        workdir,
        3,
        LEASE_TTL_S=f"{LEASE_TTL_S:g}",
        QUEUE_POLL_S="0.5",
        DB_OUTAGE_GRACE_S="120",
        MAX_CONCURRENT_TASKS=str(max(64, 2 * TASKS)),
    )
    print(f"\nchaos leases {name}: cluster in {workdir}", flush=True)
    await asyncio.to_thread(cl.start)
    run = Run(name, cl, dsn, [], [], {})
    try:
        for i in range(TASKS):
            chunks = MIN_CHUNKS + (MAX_CHUNKS - MIN_CHUNKS) * i // max(TASKS - 1, 1)
            script = chunked_script(chunks, TASK_S)
            if i % 2:
                msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": script}]}
                send = {"message": msg, "configuration": {"returnImmediately": True}}
                task = (await rpc(cl.nginx_url, "SendMessage", send, headers=V10))["task"]
                client = Client(task["id"], version="1.0")
            else:
                send = {"message": text_message(script), "configuration": {"blocking": False}}
                client = Client((await rpc(cl.nginx_url, "message/send", send))["id"])
            run.clients.append(client)
            run.following.append(asyncio.create_task(client.follow(cl.nginx_url)))
        async with asyncio.timeout(120):
            await asyncio.gather(*(c.streaming.wait() for c in run.clients))
        ids = [c.task_id for c in run.clients]
        run.owners = await holders(dsn, ids)
    except BaseException:
        await stop_run(run)
        raise
    print(f"chaos leases {name}: tasks per replica {dict(sorted(Counter(run.owners.values()).items()))}")
    return run


async def stop_run(run: Run) -> None:
    for t in run.following:
        t.cancel()
    await asyncio.gather(*run.following, return_exceptions=True)
    await run.resume()
    await asyncio.to_thread(run.cl.stop)


async def has_suspect_column(dsn: str) -> bool:
    rows = await fetch(
        dsn,
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_name = 'tasks' AND column_name = 'lease_suspect_at'",
    )
    return bool(rows)


async def until_reapers_acted(run: Run, owner: str, task_ids: list[str], within: float = 60) -> str:
    """Wait until the reapers of the other replicas have acted on `owner`'s leases, PostgreSQL back: every
    one of its working tasks marked expired (`lease_suspect_at`), or, on code without the mark, one of them
    taken from it (reaped). What was seen."""
    marks: bool | None = None
    async with asyncio.timeout(within):
        while True:
            try:
                if marks is None:
                    marks = await has_suspect_column(run.dsn)
                cols = "id, state, lease_owner" + (
                    ", lease_suspect_at IS NOT NULL AS marked" if marks else ""
                )
                rows = await fetch(run.dsn, f"SELECT {cols} FROM tasks WHERE id = ANY($1)", task_ids)
            except (OSError, asyncpg.PostgresError):
                rows = []
            if rows:
                held = [r for r in rows if r["state"] == "working" and r["lease_owner"] == owner]
                if len(held) < len(rows):
                    return f"{len(rows) - len(held)} of its {len(rows)} tasks taken from it (reaped)"
                if marks and all(r["marked"] for r in held):
                    return f"all {len(held)} of its working tasks marked expired"
            await asyncio.sleep(0.05)


async def until_renewed(run: Run, owner: str, task_ids: list[str], within: float = 30) -> str:
    """After the thaw: how long until `owner` had cleared the marks on its working tasks (renewed or
    committed), for the figures; the checks at the end say whether it kept them."""
    if not await has_suspect_column(run.dsn):
        return "no marks on this code"
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < within:
        rows = await fetch(
            run.dsn,
            "SELECT count(*) AS held, count(*) FILTER (WHERE lease_suspect_at IS NOT NULL) AS marked"
            " FROM tasks"
            " WHERE id = ANY($1) AND state = 'working' AND lease_owner = $2",
            task_ids,
            owner,
        )
        if rows[0]["marked"] == 0:
            return (
                f"its marks cleared {loop.time() - start:.1f} s after the thaw (lease TTL {LEASE_TTL_S:g} s),"
                f" {rows[0]['held']} of {len(task_ids)} tasks still its"
            )
        await asyncio.sleep(0.05)
    return f"its marks not cleared {within:g} s after the thaw"


async def until_served(cl: Cluster, i: int, within: float = 60) -> bool:
    """Wait until replica `i` answers /healthz (started, whether ready or not); False if it exited."""
    r = cl.replicas[i]
    async with asyncio.timeout(within), httpx.AsyncClient(timeout=2) as c:
        while r.alive():
            try:
                if (await c.get(r.url + "/healthz")).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    return False


async def outage_with_frozen_replica(
    run: Run, services: OwnServices, killed_during: bool
) -> tuple[str, str | None]:
    """PostgreSQL down for PG_DOWN_S; meanwhile a live replica holding tasks is frozen (and, with
    `killed_during`, the busiest one is killed first and started again just before PostgreSQL returns).
    Thawed once the reapers have marked its leases. What the reapers were seen doing, and what happened to
    a replica started during the outage."""
    by_owner = await working_by_owner(run.dsn)
    if killed_during:
        run.killed = run.busiest(by_owner)
    frozen = run.busiest(by_owner, skip=run.killed)
    frozen_id = run.cl.replicas[frozen].replica_id
    frozen_tasks = by_owner[frozen_id]
    steps = 3 if killed_during else 2
    await asyncio.to_thread(services.stop_pg)
    if killed_during:
        await asyncio.sleep(PG_DOWN_S / steps)
        await asyncio.to_thread(run.cl.kill, run.killed)
    await asyncio.sleep(PG_DOWN_S / steps)
    await run.pause(frozen)
    await asyncio.sleep(PG_DOWN_S / steps)
    started = None
    if killed_during:
        assert run.killed is not None
        await asyncio.to_thread(run.cl.spawn, run.killed)
        served = await until_served(run.cl, run.killed)
        started = "served during the outage" if served else "exited during the outage"
    await asyncio.to_thread(services.start_pg)
    try:
        seen = await until_reapers_acted(run, frozen_id, frozen_tasks)
    finally:
        await run.resume()
    renewed = await until_renewed(run, frozen_id, frozen_tasks)
    await asyncio.to_thread(run.cl.wait_all_ready)
    return f"{frozen_id} frozen with {len(frozen_tasks)} tasks, thawed when {seen}; {renewed}", started


async def redis_stop_start(run: Run, services: OwnServices) -> None:
    await asyncio.to_thread(services.stop_redis)
    await asyncio.sleep(REDIS_DOWN_S)
    await asyncio.to_thread(services.start_redis)
    await asyncio.to_thread(run.cl.wait_all_ready)


async def running_agents(cl: Cluster) -> dict[str, int | None]:
    """Each replica's `runningAgents` (None: it does not answer)."""
    out: dict[str, int | None] = {}
    async with httpx.AsyncClient(timeout=30) as c:
        for r in cl.replicas:
            try:
                out[r.replica_id] = (await c.get(r.url + "/healthz")).json()["runningAgents"]
            except (httpx.HTTPError, ValueError, KeyError):
                out[r.replica_id] = None
    return out


async def agents_after_end(cl: Cluster) -> dict[str, int | None]:
    """Each replica's `runningAgents` once every task has ended: agents of ended tasks must be gone, so a
    brief poll (a run stops within its cancel grace), not a wait."""
    agents = await running_agents(cl)
    deadline = asyncio.get_running_loop().time() + 60
    while any(agents.values()) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.5)
        agents = await running_agents(cl)
    return agents


def log_lines(cl: Cluster, task_id: str) -> list[str]:
    """What the replicas logged about a task."""
    return [
        f"{r.replica_id}: {line}"
        for r in cl.replicas
        for line in cl.log(r.index).splitlines()
        if task_id in line
    ]


async def until_clients_end(run: Run, within: float) -> None:
    """Wait for every client to see its task's end, for up to `within`; a replica that exits meanwhile (no
    fault of this test's is running) fails the run at once, with its exit code and log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pending = set(run.following)
    while pending and loop.time() < deadline:
        _, pending = await asyncio.wait(pending, timeout=1)
        gone = [r for r in run.cl.replicas if not r.alive()]
        assert not gone, "\n".join(
            f"replica {r.replica_id} exited during the run (code {r.proc.returncode if r.proc else None}); "
            f"{r.log_path}:\n{log_tail(r.log_path)}"
            for r in gone
        )


async def finish_run(run: Run, notes: list[str]) -> LeaseFigures:
    """Wait for every client, then check the run; the figures (printed), or AssertionError with the
    evidence of what went wrong."""
    cl = run.cl
    await until_clients_end(run, TASK_S + 300)
    done = {t for t in run.following if t.done()}
    pending = {t for t in run.following if not t.done()}
    for t in pending:
        t.cancel()
    for t in done:
        t.result()
    assert run.killed is not None
    killed_id = cl.replicas[run.killed].replica_id
    figures = LeaseFigures(tasks=len(run.clients))
    problems: list[str] = []
    reasons: Counter[str] = Counter()
    for c in run.clients:
        final = await rpc(cl.nginx_url, "tasks/get", {"id": c.task_id, "historyLength": 0})
        state = final["status"]["state"]
        owner = run.owners[c.task_id]
        why = reason(final)
        if state == "completed":
            figures.completed += 1
        elif state == "failed":
            figures.failed += 1
            reasons[re.sub(r"a2a-\d+", "<replica>", why)[:70]] += 1
        else:
            figures.stuck += 1
            problems.append(f"task {c.task_id} of {owner} is stuck {state}")
        if owner != killed_id and state != "completed":
            figures.failed_of_live += 1
            problems.append(
                f"task {c.task_id} of live replica {owner} ended {state}: {why!r}; last_seq "
                f"{len(await event_log(run.dsn, c.task_id))}; replica logs:\n  "
                + "\n  ".join(log_lines(cl, c.task_id))
            )
        elif state == "failed" and killed_id not in why and "restarted" not in why:
            problems.append(f"task {c.task_id} of {owner} failed for a reason naming neither: {why!r}")
        log = await event_log(run.dsn, c.task_id)
        assert log == list(range(1, len(log) + 1)), f"the event log of {c.task_id} has a hole: {log}"
        snapshot, seen = c.seqs_after_snapshot()
        expected = [s for s in log if s > snapshot]
        missing = sorted(set(expected) - set(seen))
        figures.duplicated += len(seen) - len(set(seen))
        figures.reconnects += max(c.connections - 1, 0)
        if c.refused:
            figures.refused += 1
            notes.append(
                f"v1.0 client of {c.task_id} ({state}) refused its resume after seq "
                f"{seen[-1] if seen else snapshot}: {len(missing)} event(s) after it unseen"
            )
        else:
            figures.lost += len(missing)
            if missing:
                problems.append(f"client ({c.version}) of {c.task_id} missed events {missing}")
            if c.done() and c.events[-1][1]["status"]["state"] != state:
                problems.append(f"client of {c.task_id} ended on {c.events[-1][1]}, the task is {state}")
        if len(seen) != len(set(seen)):
            problems.append(f"client ({c.version}) of {c.task_id} saw events twice")
        if pending and not c.done() and not c.refused:
            problems.append(f"client ({c.version}) of {c.task_id} never saw the end (task {state})")
    agents = await agents_after_end(cl)
    figures.agents_left = sum(n or 0 for n in agents.values())
    for r in cl.replicas:
        if not r.alive():
            problems.append(f"replica {r.replica_id} is not running; {r.log_path}")
        if agents[r.replica_id]:
            problems.append(f"replica {r.replica_id} still runs {agents[r.replica_id]} agent(s)")
        if "Task exception was never retrieved" in cl.log(r.index):
            problems.append(f"'Task exception was never retrieved' in {r.log_path}")
    taken = [
        line
        for r in cl.replicas
        for line in cl.log(r.index).splitlines()
        if re.search(r"ended or taken over by another replica", line)
    ]
    notes.append(f"{len(taken)} 'ended or taken over' log lines")
    notes.extend(f"{n} failed: {text!r}" for text, n in reasons.most_common())
    print(f"chaos leases {run.name}: {figures.line()}")
    for note in notes:
        print(f"  {note}")
    assert not problems, f"chaos leases {run.name} (logs in {cl.workdir}):\n" + "\n".join(problems)
    return figures


async def main_sequence(services: OwnServices, workdir: Path, name: str) -> LeaseFigures:
    """kill -9 of the busiest replica and its restart, Redis stopped and started, PostgreSQL down with a
    live replica frozen until the reapers marked its leases."""
    run = await start_run(services, workdir, name)
    notes: list[str] = []
    try:
        run.killed = run.busiest(await working_by_owner(run.dsn))
        killed_id = run.cl.replicas[run.killed].replica_id
        await asyncio.to_thread(run.cl.kill, run.killed)
        await asyncio.to_thread(run.cl.start_replica, run.killed)
        notes.append(f"{killed_id} killed with {Counter(run.owners.values())[killed_id]} tasks, restarted")
        await redis_stop_start(run, services)
        frozen, _ = await outage_with_frozen_replica(run, services, killed_during=False)
        notes.append(frozen)
        return await finish_run(run, notes)
    finally:
        await stop_run(run)


async def variant_sequence(services: OwnServices, workdir: Path, name: str) -> LeaseFigures:
    """Redis stopped and started; PostgreSQL down, the busiest replica killed meanwhile and started again
    before PostgreSQL is back, another live replica frozen until the reapers marked its leases."""
    run = await start_run(services, workdir, name)
    notes: list[str] = []
    try:
        await redis_stop_start(run, services)
        frozen, started = await outage_with_frozen_replica(run, services, killed_during=True)
        assert run.killed is not None
        killed_id = run.cl.replicas[run.killed].replica_id
        count = Counter(run.owners.values())[killed_id]
        notes.append(f"{killed_id} killed with {count} tasks during the outage, restarted: {started}")
        notes.append(frozen)
        return await finish_run(run, notes)
    finally:
        await stop_run(run)


async def test_no_live_replica_loses_a_task_to_a_reaper(own_services: OwnServices, tmp_path: Path):
    total = LeaseFigures()
    for k in range(1, RUNS + 1):
        total.add(await main_sequence(own_services, tmp_path / f"run-{k}", f"run {k}/{RUNS}"))
    print(f"chaos leases total of {RUNS} run(s): {total.line()}")


async def test_replica_restarting_as_the_database_returns(own_services: OwnServices, tmp_path: Path):
    total = LeaseFigures()
    for k in range(1, VARIANT_RUNS + 1):
        name = f"variant {k}/{VARIANT_RUNS}"
        total.add(await variant_sequence(own_services, tmp_path / f"variant-{k}", name))
    print(f"chaos leases total of {VARIANT_RUNS} variant run(s): {total.line()}")


# ---- the CLI round: the killed replica's CLI tasks go on from their checkpoints ------------------------


@dataclass
class CliFigures(Figures):
    resumed: int = 0
    """Tasks of the killed replica that went on from their checkpoint elsewhere and completed."""

    def line(self) -> str:
        order = "tasks completed resumed failed stuck lost duplicated reconnects".split()
        return ", ".join(f"{k} {getattr(self, k)}" for k in order)


def workspace_file(cl: Cluster, holder: str, context_id: str) -> Path:
    """The fake CLI's `progress.txt` in the context's workspace on `holder`'s machine (`Machines`)."""
    return cl.workdir / "machines" / holder / principal_key(ANONYMOUS) / context_id / "progress.txt"


async def checkpoint_after_file(run: Run, task_id: str, written: Path, holder: str) -> None:
    """Wait until `holder` has saved a checkpoint of the task whose archive holds `written` (its CLI's
    file): the archive itself, not its `taken_at` (`tests/support/checkpoints.py`)."""
    try:
        async with asyncio.timeout(120):
            while True:
                rows = await fetch(
                    run.dsn,
                    "SELECT data FROM task_checkpoints WHERE task_id = $1 AND holder = $2",
                    task_id,
                    holder,
                )
                if rows and holds_files(bytes(rows[0]["data"]), written.name):
                    return
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(
            f"no checkpoint of {task_id} by {holder} holds {written}; logs:\n  "
            + "\n  ".join(log_lines(run.cl, task_id))
        ) from None


def said(task: dict[str, Any]) -> str:
    """Every text of the task's artifacts."""
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


def status_messages(client: Client) -> list[dict[str, Any]]:
    """The status messages a client saw."""
    return [
        ev["status"]["message"]
        for _, ev in client.events
        if ev.get("kind") == "status-update" and ev["status"].get("message")
    ]


def text_of(message: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for p in message.get("parts", []))


async def start_cli_run(services: OwnServices, workdir: Path, name: str) -> tuple[Run, dict[str, str]]:
    """Three replicas, each a machine of its own, running the `ndjson` adapter with the fake CLI (a
    checkpoint every second); `CLI_TASKS` tasks of it sent to the replicas in turn (each runs what it is
    sent), followed through nginx (half over v0.3, half over v1.0), each working with a checkpoint taken
    after its CLI wrote `progress.txt`. The run and each task's context."""
    db_url = await _fresh_pg_database(services.pg_url)
    dsn = db_url.replace("postgresql+asyncpg://", "postgresql://")
    cl = Machines(
        db_url,
        services.redis_url,
        workdir,
        3,
        AGENT_ADAPTER="ndjson",
        AGENT_COMMAND=NDJSON,
        AGENT_SANDBOX_READ=str(FAKES),
        CHECKPOINT_S="1",
        CANCEL_GRACE_S="2",
        LEASE_TTL_S=f"{CLI_LEASE_TTL_S:g}",
        QUEUE_POLL_S="0.5",
        MAX_CONCURRENT_TASKS=str(max(16, 2 * CLI_TASKS)),
    )
    print(f"\nchaos leases {name}: cluster in {workdir}", flush=True)
    await asyncio.to_thread(cl.start)
    run = Run(name, cl, dsn, [], [], {})
    contexts: dict[str, str] = {}
    script = f"WORK {max(int(CLI_TASK_S / CLI_LINE_S), 1)} {CLI_LINE_S:g}"
    try:
        for i in range(CLI_TASKS):
            base = cl.urls[i % len(cl.replicas)]
            if i % 2:
                msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": script}]}
                send = {"message": msg, "configuration": {"returnImmediately": True}}
                task = (await rpc(base, "SendMessage", send, headers=V10))["task"]
                client = Client(task["id"], version="1.0")
            else:
                send = {"message": text_message(script), "configuration": {"blocking": False}}
                task = await rpc(base, "message/send", send)
                client = Client(task["id"])
            contexts[task["id"]] = task["contextId"]
            run.clients.append(client)
            run.following.append(asyncio.create_task(client.follow(cl.nginx_url)))
        async with asyncio.timeout(120):
            await asyncio.gather(*(c.streaming.wait() for c in run.clients))
        ids = list(contexts)
        run.owners = await holders(dsn, ids)
        for task_id, owner in run.owners.items():
            await checkpoint_after_file(run, task_id, workspace_file(cl, owner, contexts[task_id]), owner)
    except BaseException:
        await stop_run(run)
        raise
    print(f"chaos leases {name}: tasks per replica {dict(sorted(Counter(run.owners.values()).items()))}")
    return run, contexts


async def check_cli_run(run: Run, on_killed: set[str], reaped: bool) -> CliFigures:
    """Every task completed; each of the killed replica's (`on_killed`) went on from its checkpoint once (one
    attempt naming the replica, its resumed run found `progress.txt` restored), the others ran once; each
    client saw the task's event log after its snapshot exactly once, in order; no replica runs an agent any
    more. `reaped`: the killed replica was restarted only once the reapers had handed its tasks on, so each
    hand-on's text names it too."""
    cl = run.cl
    await until_clients_end(run, CLI_TASK_S + 300)
    for t in run.following:
        if t.done():
            t.result()
    assert run.killed is not None
    killed_id = cl.replicas[run.killed].replica_id
    figures = CliFigures(tasks=len(run.clients))
    problems: list[str] = []
    reasons: Counter[str] = Counter()
    for c in run.clients:
        final = await rpc(cl.nginx_url, "tasks/get", {"id": c.task_id})
        state = final["status"]["state"]
        owner = run.owners[c.task_id]
        if state == "completed":
            figures.completed += 1
        else:
            if state == "failed":
                figures.failed += 1
            else:
                figures.stuck += 1
            problems.append(
                f"task {c.task_id} of {owner} ended {state}: {reason(final)!r}; replica logs:\n  "
                + "\n  ".join(log_lines(cl, c.task_id))
            )
        attempts = (final.get("metadata") or {}).get("attempts", [])
        found = f"resumed with progress.txt of {c.task_id}"
        if c.task_id in on_killed:
            if [(a.get("attempt"), a.get("previous")) for a in attempts] != [(2, f"replica {killed_id}")]:
                problems.append(f"task {c.task_id} of the killed {killed_id} lists attempts {attempts}")
            if found not in said(final):
                problems.append(f"the resumed run of {c.task_id} did not find progress.txt restored")
            elif state == "completed":
                figures.resumed += 1
            # The hand-on's status names the replica that died, in its `resume` metadata and its text (the
            # lease that stopped, or the replica's restart); the next one names who goes on.
            seen_messages = status_messages(c)
            resumes = [(m.get("metadata") or {}).get("resume") for m in seen_messages]
            resumes = [r for r in resumes if r]
            if [(r.get("attempt"), r.get("previous")) for r in resumes] != [(2, f"replica {killed_id}")]:
                problems.append(f"client of {c.task_id} saw the resumes {resumes}")
            else:
                why = resumes[0]["reason"]
                reasons[re.sub(r"a2a-\d+", "<replica>", why)] += 1
                # Restarted at once, its restart or the other replicas' reapers hand a task on, whichever
                # comes first (on a busy machine the restart can take longer than the reapers' two TTLs).
                lease = "running this task stopped renewing"
                whys = (lease,) if reaped else (lease, "restarted while this task")
                if not any(why.startswith(f"Replica {killed_id} {w}") for w in whys):
                    problems.append(f"the hand-on of {c.task_id} says {why!r}")
            on = "goes on with this task from its checkpoint (attempt 2)."
            if not any(text_of(m).startswith("Replica ") and text_of(m).endswith(on) for m in seen_messages):
                texts = [text_of(m) for m in seen_messages]
                problems.append(f"client of {c.task_id} saw no status naming who went on: {texts}")
        elif attempts or found in said(final):
            problems.append(f"task {c.task_id} of live replica {owner} was handed on: {attempts}")

        log = await event_log(run.dsn, c.task_id)
        assert log == list(range(1, len(log) + 1)), f"the event log of {c.task_id} has a hole: {log}"
        snapshot, seen = c.seqs_after_snapshot()
        expected = [s for s in log if s > snapshot]
        figures.lost += len(set(expected) - set(seen))
        figures.duplicated += len(seen) - len(set(seen))
        figures.reconnects += max(c.connections - 1, 0)
        if c.refused:
            problems.append(f"v1.0 client of {c.task_id} was refused its resume after {seen[-1:]}")
        elif seen != expected:
            problems.append(f"client ({c.version}) of {c.task_id} saw {seen}, the log after it is {expected}")
        elif not c.done() or c.events[-1][1]["status"]["state"] != state:
            problems.append(f"client of {c.task_id} never saw the end (task {state})")
    agents = await agents_after_end(cl)
    for r in cl.replicas:
        if agents[r.replica_id]:
            problems.append(f"replica {r.replica_id} still runs {agents[r.replica_id]} agent(s)")
        if "Task exception was never retrieved" in cl.log(r.index):
            problems.append(f"'Task exception was never retrieved' in {r.log_path}")
    print(f"chaos leases {run.name}: {figures.line()}")
    for text, n in reasons.most_common():
        print(f"  {n} handed on: {text!r}")
    assert not problems, f"chaos leases {run.name} (logs in {cl.workdir}):\n" + "\n".join(problems)
    return figures


async def until_handed_on(run: Run, holder: str, task_ids: set[str], within: float = 120) -> None:
    """Wait until no task of `task_ids` is held by `holder` any more (the reapers handed them on)."""
    async with asyncio.timeout(within):
        while await fetch(
            run.dsn, "SELECT id FROM tasks WHERE id = ANY($1) AND lease_owner = $2", list(task_ids), holder
        ):
            await asyncio.sleep(0.2)


async def cli_sequence(services: OwnServices, workdir: Path, name: str, reaped: bool) -> CliFigures:
    """kill -9 of the replica holding the most CLI tasks, each with its checkpoint; its machine's disk lost
    (its workspace root removed), and the replica restarted under the same name: at once (its tasks are
    handed on by its restart or by the other replicas' reapers, whichever comes first), or with `reaped`
    once the reapers have handed them on."""
    run, contexts = await start_cli_run(services, workdir, name)
    try:
        by_owner = await working_by_owner(run.dsn)
        run.killed = run.busiest(by_owner)
        killed_id = run.cl.replicas[run.killed].replica_id
        on_killed = {t for t in by_owner.get(killed_id, []) if t in contexts}
        assert len(on_killed) >= 2, f"the killed replica holds {on_killed} only: {by_owner}"
        await asyncio.to_thread(run.cl.kill, run.killed)
        shutil.rmtree(run.cl.workdir / "machines" / killed_id)
        if reaped:
            await until_handed_on(run, killed_id, on_killed)
        await asyncio.to_thread(run.cl.start_replica, run.killed)
        when = "once the reapers handed its tasks on" if reaped else "at once"
        print(
            f"  {killed_id} killed with {len(on_killed)} CLI tasks, its workspaces removed, restarted {when}"
        )
        return await check_cli_run(run, on_killed, reaped)
    finally:
        await stop_run(run)


async def test_a_killed_replicas_cli_tasks_complete_from_their_checkpoints(
    own_services: OwnServices, tmp_path: Path
):
    total = CliFigures()
    for k in range(1, CLI_RUNS + 1):
        name = f"cli run {k}/{CLI_RUNS}"
        total.add(await cli_sequence(own_services, tmp_path / f"cli-{k}", name, reaped=k % 2 == 0))
    print(f"chaos leases total of {CLI_RUNS} CLI run(s): {total.line()}")
