"""`new_id`: the ids the server makes (tasks, contexts, messages, artifacts) are random version 4 UUIDs in
their canonical text, though formatted by hand."""

from __future__ import annotations

import uuid

from app.protocol.model import new_id


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
