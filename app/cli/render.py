"""How the admin commands print (`admin.py`): a readable table or text on a terminal, JSON with `--json`; an
event of a task's log on one line (`tasks tail`), and one task whole (`tasks show`).

It imports the protocol's types and encoders, and the admin reads' record type: it reads nothing itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TextIO

import orjson

from app.protocol import protojson_v10
from app.protocol.events import ArtifactUpdate, EventRecord, StatusUpdate
from app.protocol.model import Message, Part, Task, iso, parse_iso
from app.store.admin import TaskRecord


def write_json(value: Any, out: TextIO) -> None:
    out.write(orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")


def write_line(value: Any, out: TextIO) -> None:
    out.write(orjson.dumps(value, default=str).decode() + "\n")
    out.flush()


def cut(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: list[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")


def when(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        value = parse_iso(value)
    return iso(value)[:19] + "Z"


def message_text(m: Message | None) -> str:
    if m is None:
        return ""
    others = [p for p in m.parts if p.text is None]
    return m.text() + (f" [+{len(others)} {'part' if len(others) == 1 else 'parts'}]" if others else "")


def parts_text(parts: list[Part]) -> str:
    out = []
    for p in parts:
        if p.text is not None:
            out.append(p.text)
        elif p.kind == "file":
            out.append(f"[file {p.filename or p.url or p.media_type or ''}]".replace(" ]", "]"))
        else:
            out.append("[data]")
    return "".join(out)


def event_line(record: EventRecord) -> str:
    """One event of the log, on one line: its number, kind and what it says."""
    ev = record.event
    if isinstance(ev, StatusUpdate):
        text = cut(message_text(ev.status.message), 160)
        return f"{record.seq:>5}  {when(ev.status.timestamp)}  status    {ev.status.state.value}" + (
            f"  {text}" if text else ""
        )
    assert isinstance(ev, ArtifactUpdate)
    flags = ("+" if ev.append else "") + ("." if ev.last_chunk else "")
    return f"{record.seq:>5}  {'':20}  artifact  {ev.artifact.artifact_id}{flags}  " + cut(
        parts_text(ev.artifact.parts), 160
    )


def event_json(record: EventRecord) -> dict[str, Any]:
    """One event as JSON: its number and the v1.0 `StreamResponse` a subscriber gets."""
    return {"seq": record.seq, **protojson_v10.encode_event(record.event)}


def show_text(
    task: Task,
    record: TaskRecord,
    lease: dict[str, Any] | None,
    deliveries: list[Any],
    usage: list[dict[str, Any]],
    out: TextIO,
) -> None:
    w = out.write
    w(f"task      {task.id}\n")
    w(f"state     {task.status.state.value} since {when(task.status.timestamp)}\n")
    if task.status.message is not None:
        w(f"message   {cut(message_text(task.status.message), 300)}\n")
    for label, value in (
        ("owner", record.owner),
        ("role", record.role),
        ("context", task.context_id),
        ("created", when(record.created_at)),
        ("updated", when(record.updated_at)),
        ("events", str(record.last_seq)),
    ):
        w(f"{label:<9} {value}\n")
    if lease is None:
        w("lease     none\n")
    else:
        expired = ""
        if lease["expired"]:
            marked = f", marked {when(lease['suspectAt'])}" if lease["suspectAt"] else ""
            expired = f" (expired{marked})"
        w(f"lease     {lease['holder']} until {when(lease['expiresAt'])}{expired}\n")
    w("\ntransitions\n")
    for t in task.transitions:
        w(f"  {when(t.timestamp)}  {t.state.value}\n")
    w(f"\nhistory ({len(task.history)})\n")
    for m in task.history:
        w(f"  {m.role.value:<6} {cut(message_text(m), 300)}\n")
    w(f"\nartifacts ({len(task.artifacts)})\n")
    for a in task.artifacts:
        w(f"  {a.artifact_id}" + (f" ({a.name})" if a.name else "") + f"  {cut(parts_text(a.parts), 300)}\n")
    w(f"\npush deliveries ({len(deliveries)})\n")
    for d in deliveries:
        last = f"  last: {cut(d.last_outcome, 80)} at {when(d.last_attempt_at)}" if d.last_outcome else ""
        w(
            f"  {d.config_id}  {d.url}  v{d.version}  delivered {d.delivered}  failed {d.failed}"
            f"  pending {d.pending}{last}\n"
        )
    w(f"\nusage ({len(usage)} rows)\n")
    for u in usage:
        cost = "?" if u["cost_usd"] is None else f"${u['cost_usd']:.4f} ({u['cost_source']})"
        w(
            f"  event {u['seq']}  {u['model'] or '-'}  in {u['input_tokens']}  out {u['output_tokens']}"
            f"  cache r/w {u['cache_read_tokens']}/{u['cache_write_tokens']}  {cost}"
            f"  wall {u['wall_ms'] / 1000:g} s  turns {u['turns']}  tools {u['tool_calls']}\n"
        )
    total = (task.metadata or {}).get("usage")
    if total:
        cost = total.get("costUsd")
        w(
            f"  total  in {total.get('inputTokens')}  out {total.get('outputTokens')}"
            f"  cost {'?' if cost is None else f'${cost:.4f}'}  reports {total.get('reports')}\n"
        )
