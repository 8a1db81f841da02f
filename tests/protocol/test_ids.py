"""`new_id`: the ids the server makes (tasks, contexts, messages, artifacts) are random version 4 UUIDs in
their canonical text, though formatted by hand."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from app.protocol.model import iso, name_id, new_id


def test_new_ids_are_canonical_random_version_4_uuids():
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    # Every hex digit outside the fixed version and variant bits varies across the ids.
    fixed = {14, 19}
    for i in range(36):
        if ids[0][i] != "-" and i not in fixed:
            assert len({t[i] for t in ids}) > 8, i


def test_name_ids_are_uuid5_exactly():
    """A task's response artifact id is `name_id` of its task id: a run resumed on a replica of another
    release must find the same id, so it stays what `uuid.uuid5` gives."""
    for name in ["", "a2a:t:response", "ü-ñ-東京", *(new_id() for _ in range(500))]:
        for namespace in (uuid.NAMESPACE_URL, uuid.NAMESPACE_DNS):
            assert name_id(namespace, name) == str(uuid.uuid5(namespace, name))


def test_iso_is_isoformat_at_milliseconds_with_a_z():
    start = datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    stamps = [start + timedelta(microseconds=7_919 * i) for i in range(2000)]
    stamps += [datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC)]
    stamps.append(datetime(2026, 6, 1, 12, 0, 0, 123_456, tzinfo=timezone(timedelta(hours=-7))))
    for ts in stamps:
        assert iso(ts) == ts.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
