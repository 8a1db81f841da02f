"""Readiness against the database's migration: behind this code's head is not ready, a later release's is."""

from __future__ import annotations

from app.api.endpoints.health import _known_revisions, head_revision, migration_gap


def test_at_head_is_ready():
    assert migration_gap(head_revision()) is None


def test_behind_head_or_unmigrated_is_not_ready():
    head = head_revision()
    older = sorted(_known_revisions() - {head})
    assert older, "the migrations have more than one revision"
    for revision in [*older, None]:
        gap = migration_gap(revision)
        assert gap is not None and f"this code needs {head}: run the migrations" in gap


def test_a_later_release_revision_is_ready():
    # Expand / contract: the next release's migrations only add, so this release serves on them while the
    # next one is rolled out (scripts/upgrade_check.py runs the previous release on this code's head).
    assert migration_gap("9999_from_a_later_release") is None
