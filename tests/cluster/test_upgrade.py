"""Upgrades without downtime: `make upgrade-check` (scripts/upgrade_check.py) as part of `make test`.

The previous release of RELEASES and this code on one fresh PostgreSQL database behind nginx: this code's
migrations run while the release serves, then sends, streams resumed with Last-Event-ID, answers, cancels,
GetTask and ListTasks across the versions, then the roll (the release's replica out of nginx, stopped, back
with this code); then this code's replica stopped while it runs three CLI tasks, each of which must go on on
the other from its checkpoint and complete. No 5xx, every task in its expected final state. The release's
venv is made once under .cache/releases/ (about 40 s); the check itself takes about a minute.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scripts.upgrade_check import run


def test_previous_release_and_this_code_roll_without_downtime(tmp_path: Path):
    pg = os.environ.get("TEST_POSTGRES_URL")
    redis = os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both and sets them")
    report = run(pg, redis, tmp_path)
    print(report.summary())
    assert report.ok, report.summary()
