"""The streaming measurements of bench/cluster.py, against any A2A v0.3 JSON-RPC server (ours or the SDK's).

- `propagation`: a stamped task started on replica A, read through `tasks/resubscribe` on replica B; each
  chunk's delay is its receipt time minus the `time.time_ns()` stamped into it at emission.
- `events_rate`: tasks emitting chunks as fast as they can, N readers on the same replica; SSE events
  delivered per second in total, each stream checked for order and completeness by its SSE ids.
- `many_streams`: thousands of `tasks/resubscribe` streams on one replica; the replica's memory once every
  stream has its first event; then the tasks are cancelled and every stream must end with `canceled`.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .cpu import proc_cpu_s
from .sse import SseError, SseEvent, SseStream, rpc_body

RPC_PATH = "/a2a/jsonrpc"
TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def message(text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }


async def start_task(client: httpx.AsyncClient, base_url: str, text: str) -> str:
    """A non-blocking `message/send` to this replica (which then runs the task); the new task's id."""
    params = {"message": message(text), "configuration": {"blocking": False}}
    r = await client.post(base_url + RPC_PATH, content=rpc_body("message/send", params))
    doc = r.json()
    task = doc.get("result") or {}
    if r.status_code != 200 or "error" in doc or task.get("kind") != "task":
        raise RuntimeError(f"non-blocking message/send to {base_url}: {r.status_code} {r.text[:300]}")
    return str(task["id"])


async def cancel_task(client: httpx.AsyncClient, base_url: str, task_id: str) -> str:
    """`tasks/cancel`; the state it answers with (or the error message)."""
    r = await client.post(base_url + RPC_PATH, content=rpc_body("tasks/cancel", {"id": task_id}))
    doc = r.json()
    if "error" in doc:
        return f"error {doc['error'].get('code')}: {doc['error'].get('message')}"
    return str(doc.get("result", {}).get("status", {}).get("state"))


def resubscribe(base_url: str, task_id: str, rid: int = 1) -> SseStream:
    return SseStream(base_url + RPC_PATH, rpc_body("tasks/resubscribe", {"id": task_id}, rid))


def _result(ev: SseEvent) -> dict[str, Any]:
    doc = json.loads(ev.data)
    if "error" in doc:
        raise RuntimeError(f"error event: {ev.data[:300]}")
    return doc.get("result") or {}


def _state(result: dict[str, Any]) -> str | None:
    return (result.get("status") or {}).get("state")


def _stamps(artifact: dict[str, Any]) -> list[int]:
    """The emission stamps (ns) in an artifact's text parts."""
    out = []
    for part in artifact.get("parts") or []:
        text = str(part.get("text") or "")
        if text.isdigit() and len(text) >= 18:
            out.append(int(text))
    return out


# ---- cross-replica propagation -------------------------------------------------------------------------


@dataclass
class PropagationRead:
    """One reader of a stamped task: the delays of the chunks it received live, and how many it did not."""

    delays_ms: list[float] = field(default_factory=list)
    received: dict[int, int] = field(default_factory=dict)
    """Emission stamp → receipt time (ns) of each live chunk."""
    in_snapshot: int = 0
    final_state: str | None = None
    problem: str = ""


async def read_stamps(url: str, task_id: str, count: int, timeout_s: float) -> PropagationRead:
    """Resubscribe on `url`; each live chunk's delay = its receipt time - the stamp in its text."""
    rd = PropagationRead()
    stream = resubscribe(url, task_id)
    try:
        async with asyncio.timeout(timeout_s):
            await stream.open()
            first = True
            async for ev in stream.events():
                result = _result(ev)
                if first and result.get("kind") == "task":
                    rd.in_snapshot = sum(len(_stamps(a)) for a in result.get("artifacts") or [])
                first = False
                if result.get("kind") == "artifact-update":
                    for stamp in _stamps(result.get("artifact") or {}):
                        rd.delays_ms.append((ev.t_ns - stamp) / 1e6)
                        rd.received[stamp] = ev.t_ns
                state = _state(result)
                if state in TERMINAL:
                    rd.final_state = state
                    break
    except (TimeoutError, SseError, RuntimeError) as exc:
        rd.problem = f"{type(exc).__name__}: {exc}"
    finally:
        stream.close()
    if not rd.problem and rd.final_state != "completed":
        rd.problem = f"the stream ended without the task completing (last state {rd.final_state})"
    elif not rd.problem and len(rd.delays_ms) + rd.in_snapshot != count:
        rd.problem = f"{len(rd.delays_ms)} live + {rd.in_snapshot} in the snapshot of {count} chunks"
    return rd


@dataclass
class PropagationRun:
    """One stamped task started on A, read at once on B (cross-replica) and on A (same replica)."""

    task_id: str
    cross: PropagationRead
    local: PropagationRead


async def propagation(
    a_url: str, b_url: str, runs: int, count: int, text: str, timeout_s: float
) -> list[PropagationRun]:
    """`runs` stamped tasks one after the other: A runs each, readers on B and on A time its chunks."""
    out = []
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(runs):
            task_id = await start_task(client, a_url, text)
            cross, local = await asyncio.gather(
                read_stamps(b_url, task_id, count, timeout_s), read_stamps(a_url, task_id, count, timeout_s)
            )
            out.append(PropagationRun(task_id, cross, local))
    return out


# ---- streamed events per second through one replica ----------------------------------------------------


@dataclass
class Reader:
    """One SSE reader of a fast task: ids seen from its first chunk on; when the first and last arrived."""

    task_id: str
    snapshot_seq: int = 0
    events: int = 0
    t_first: int = 0
    t_last: int = 0
    final_state: str | None = None
    ended: bool = False
    problem: str = ""


FIRST_CHUNK = '"chunk-0 "'
"""The scripted agent's first chunk (`chunks:<n>`), as it stands in an event's JSON."""


async def read_fast(base_url: str, task_id: str, timeout_s: float) -> Reader:
    """Resubscribe; count every complete event from the task's first chunk on (not its start-up events, which
    come before the gate's sleep), checking ids run on by one."""
    rd = Reader(task_id)
    stream = resubscribe(base_url, task_id)
    try:
        async with asyncio.timeout(timeout_s):
            await stream.open()
            expected: int | None = None
            async for ev in stream.events():
                if ev.id is None or not ev.id.isdigit():
                    raise RuntimeError(f"event without a numeric SSE id: {ev.data[:200]}")
                seq = int(ev.id)
                if expected is None:
                    rd.snapshot_seq = seq
                elif seq != expected:
                    raise RuntimeError(f"event id {seq} where {expected} was due")
                elif rd.t_first or FIRST_CHUNK in ev.data:
                    rd.events += 1
                    rd.t_first = rd.t_first or ev.t_ns
                    rd.t_last = ev.t_ns
                expected = seq + 1
                if '"final":true' in ev.data or '"state":"' in ev.data:
                    state = _state(_result(ev))
                    if state in TERMINAL:
                        rd.final_state = state
            rd.ended = stream.ended
    except (TimeoutError, SseError, RuntimeError) as exc:
        rd.problem = f"{type(exc).__name__}: {exc}"
    finally:
        stream.close()
    if not rd.problem and (rd.final_state != "completed" or not rd.ended):
        rd.problem = f"stream ended={rd.ended} with final state {rd.final_state}"
    return rd


@dataclass
class RatePoint:
    """Events delivered per second to `readers` streams over `tasks` fast tasks."""

    tasks: int
    readers: int
    chunks_per_task: int
    events: int
    seconds: float
    client_cpu: float
    problems: list[str]

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "readers": self.readers,
            "chunks_per_task": self.chunks_per_task,
            "events": self.events,
            "seconds": round(self.seconds, 3),
            "events_per_s": round(self.rate, 1),
            "client_cpu_cores": round(self.client_cpu, 2),
            "problems": self.problems,
        }


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def events_rate(
    base_url: str, tasks: int, readers: int, chunks: int, gate_s: float, timeout_s: float
) -> RatePoint:
    """`tasks` tasks `sleep:<gate>;chunks:<chunks>` on the replica; `readers` streams spread over them.

    The sleep lets every reader subscribe before the chunks start; the rate counts the events each reader
    got after its snapshot, from the first to the last across all readers.
    """
    async with httpx.AsyncClient(timeout=30) as client:
        ids = [await start_task(client, base_url, f"sleep:{gate_s:g};chunks:{chunks}") for _ in range(tasks)]
    cpu0 = _self_cpu_s()
    t0 = time.monotonic()
    got = await asyncio.gather(*(read_fast(base_url, ids[i % tasks], timeout_s) for i in range(readers)))
    cpu = (_self_cpu_s() - cpu0) / max(time.monotonic() - t0, 1e-6)
    problems = [f"task {r.task_id}: {r.problem}" for r in got if r.problem]
    firsts = [r.t_first for r in got if r.t_first]
    lasts = [r.t_last for r in got if r.t_last]
    seconds = (max(lasts) - min(firsts)) / 1e9 if firsts and lasts else 0.0
    return RatePoint(tasks, readers, chunks, sum(r.events for r in got), seconds, cpu, problems)


# ---- many open streams on one replica ------------------------------------------------------------------


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


@dataclass
class Held:
    """One of the many streams: first event seen, how it ended."""

    task_id: str
    first: asyncio.Event = field(default_factory=asyncio.Event)
    final_state: str | None = None
    ended: bool = False
    problem: str = ""


async def hold_stream(base_url: str, held: Held, opening: asyncio.Semaphore, timeout_s: float) -> None:
    """Open a resubscribe stream (at most a few opening at once), then read it to its end."""
    stream = resubscribe(base_url, held.task_id)
    try:
        async with asyncio.timeout(timeout_s):
            async with opening:
                await stream.open()
            async for ev in stream.events():
                held.first.set()
                if '"state":"' in ev.data:
                    state = _state(_result(ev))
                    if state in TERMINAL:
                        held.final_state = state
            held.ended = stream.ended
    except (TimeoutError, SseError, RuntimeError) as exc:
        held.problem = f"{type(exc).__name__}: {exc}"
    finally:
        held.first.set()
        stream.close()


@dataclass
class ManyStreams:
    """The outcome of `many_streams`: memory before and with the streams open, and how they ended."""

    streams: int
    tasks: int
    rss_idle_kib: int
    rss_before_kib: int
    rss_open_kib: int
    hwm_open_kib: int
    rss_after_kib: int
    open_s: float
    hold_cpu_cores: float
    end_s: float
    opened: int
    ended_canceled: int
    cancel_answers: dict[str, int]
    problems: list[str]
    samples: list[dict[str, float]]

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


async def many_streams(
    base_url: str,
    pid: int,
    tasks: int,
    streams: int,
    script: str,
    open_timeout_s: float,
    end_timeout_s: float,
    hold_s: float,
    progress: Callable[[str], None],
) -> ManyStreams:
    """`tasks` long tasks on the replica, `streams` resubscribe streams over them; memory; then cancel."""
    rss_idle = memory_kib(pid)["VmRSS"]
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=32)) as client:
        ids = list(await asyncio.gather(*(start_task(client, base_url, script) for _ in range(tasks))))
    await asyncio.sleep(1)
    rss_before = memory_kib(pid)["VmRSS"]
    helds = [Held(ids[i % tasks]) for i in range(streams)]
    opening = asyncio.Semaphore(256)
    t0 = time.monotonic()
    total_s = open_timeout_s + hold_s + end_timeout_s + 60
    readers = [asyncio.create_task(hold_stream(base_url, h, opening, total_s)) for h in helds]
    samples: list[dict[str, float]] = []
    waiting = asyncio.gather(*(h.first.wait() for h in helds))
    deadline = t0 + open_timeout_s
    while not waiting.done() and time.monotonic() < deadline:
        await asyncio.wait({waiting}, timeout=2)
        n = sum(h.first.is_set() for h in helds)
        mem = memory_kib(pid)
        samples.append({"t_s": round(time.monotonic() - t0, 1), "first_events": n, **mem})
        progress(
            f"{n} of {streams} streams have their first event; replica VmRSS {mem['VmRSS'] / 1024:.0f} MiB"
        )
    waiting.cancel()
    open_s = time.monotonic() - t0
    opened = sum(h.first.is_set() and not h.problem for h in helds)
    mem_open = memory_kib(pid)
    hold_cpu = 0.0
    if hold_s > 0:
        cpu0 = proc_cpu_s(pid)
        await asyncio.sleep(hold_s)
        hold_cpu = (proc_cpu_s(pid) - cpu0) / hold_s
        mem_held = memory_kib(pid)
        samples.append({"t_s": round(time.monotonic() - t0, 1), "held": 1, **mem_held})
        mem_open = {"VmRSS": max(mem_open["VmRSS"], mem_held["VmRSS"]), "VmHWM": mem_held["VmHWM"]}
    t1 = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as client:
        answers = await asyncio.gather(*(cancel_task(client, base_url, t) for t in ids))
    _, pending = await asyncio.wait(readers, timeout=end_timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    end_s = time.monotonic() - t1
    counts: dict[str, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    problems = []
    bad = [h for h in helds if h.problem or h.final_state != "canceled" or not h.ended]
    if bad:
        kinds: dict[str, int] = {}
        for h in bad:
            key = h.problem.split(":", 1)[0] if h.problem else f"ended={h.ended} state={h.final_state}"
            kinds[key] = kinds.get(key, 0) + 1
        problems.append(f"{len(bad)} of {streams} streams did not end with canceled: {kinds}; e.g. {bad[0]}")
    if pending:
        problems.append(f"{len(pending)} streams still open {end_timeout_s:g} s after the cancels")
    return ManyStreams(
        streams=streams,
        tasks=tasks,
        rss_idle_kib=rss_idle,
        rss_before_kib=rss_before,
        rss_open_kib=mem_open["VmRSS"],
        hwm_open_kib=mem_open["VmHWM"],
        rss_after_kib=memory_kib(pid)["VmRSS"],
        open_s=open_s,
        hold_cpu_cores=hold_cpu,
        end_s=end_s,
        opened=opened,
        ended_canceled=streams - len(bad),
        cancel_answers=counts,
        problems=problems,
        samples=samples,
    )
