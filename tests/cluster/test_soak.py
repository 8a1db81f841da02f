"""The soak's short form (`make soak` runs the hour, bench/soak.py): the same harness for six windows of
`SOAK_FAULT_EVERY_S` (37 s), all six faults once each (a replica killed, Redis restarted, PostgreSQL
restarted, PostgreSQL down `SOAK_PG_DOWN_S`, the worker killed, nginx reloaded) under the steady mixed load
on both protocol versions, then every target MET: no task lost, doubled or stuck, no event missing or out of
order on any stream, every webhook delivered, no request failed, and each replica's RSS and open fds within
10 % of their value after four windows (the warm-up of the short form: the database faults are over, and
the connection pools have grown to what the load needs). About four minutes; the tables are printed (`-s`)
and the run's logs and report.json stay under the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import soak
from tests.support.secrets import remember

pytestmark = pytest.mark.skipif(
    os.environ.get("SOAK_SHORT") != "1",
    reason="the soak's short form runs with SOAK_SHORT=1 (`make test` and `make soak-short` set it): about "
    "4.5 minutes a plain pytest run of the cluster tests need not spend",
)

FAULT_EVERY_S = float(os.environ.get("SOAK_FAULT_EVERY_S", "37"))
PG_DOWN_S = float(os.environ.get("SOAK_PG_DOWN_S", "10"))


async def test_soak_short_form_meets_every_target(tmp_path: Path):
    cfg = soak.Config(
        duration_s=len(soak.FAULTS) * FAULT_EVERY_S,
        fault_every_s=FAULT_EVERY_S,
        pg_down_s=PG_DOWN_S,
        baseline_s=4 * FAULT_EVERY_S,
        sample_s=2,
        drain_s=180,
        workdir=tmp_path / "soak",
    )
    remember(cfg.worker_key)
    report = await soak.run(cfg)
    assert report.all_met(), f"logs in {cfg.workdir}\n{report.text}"
