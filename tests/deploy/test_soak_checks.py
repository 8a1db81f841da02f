"""The soak's stream check (bench/soak.py `Checks.check_streams`), on records made by hand: a v1.0 resume
refused because its task had ended is no missing stream; a stream that saw nothing of a task still running,
or a refusal the stored events do not bear out, is."""

from __future__ import annotations

from bench.soak import Checks, StreamRecord


def event(seq: int, state: str | None, final: bool = False, kind: str = "status") -> dict[str, object]:
    return {"seq": seq, "kind": kind, "state": state, "final": final, "run_start": False}


def check(stream: StreamRecord, log: dict[str, list[dict[str, object]]]) -> Checks:
    checks = Checks(soak=None, end=0.0)  # type: ignore[arg-type]  # check_streams reads only its arguments
    checks.check_streams([stream], log)  # type: ignore[arg-type]
    return checks


def test_a_resume_refused_after_its_task_failed_is_no_problem():
    stream = StreamRecord("m", "resubscribe", "1.0", "t1", refused=True)
    checks = check(
        stream, {"t1": [event(1, "submitted"), event(2, "working"), event(3, "failed", final=True)]}
    )
    assert checks.problems == []
    assert (checks.figures.streams_unfinished, checks.figures.resumes_refused) == (0, 1)


def test_a_refusal_the_stored_events_do_not_bear_out_is_a_problem():
    stream = StreamRecord("m", "resubscribe", "1.0", "t1", refused=True)
    checks = check(stream, {"t1": [event(1, "submitted"), event(2, "working")]})
    assert checks.figures.streams_unfinished == 1
    assert checks.problems == [
        "stream of t1 (m, 1.0 resubscribe) saw no event (its resume refused);"
        " stored events 1:submitted 2:working"
    ]


def test_a_stream_that_saw_nothing_is_a_problem():
    checks = check(StreamRecord("m", "stream", "0.3", "t1"), {"t1": [event(1, "completed", final=True)]})
    assert (
        checks.figures.streams_unfinished == 1
        and "saw no event; stored events 1:completed" in checks.problems[0]
    )
