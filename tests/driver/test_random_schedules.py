"""A seeded random run: one query, a few dozen batches, each with a random crash point (driver or
recovery) and sometimes a transaction timeout that runs out while the driver is down. One audit at
the end proves every batch exactly once. TWOPC_RANDOM_SEED / TWOPC_RANDOM_BATCHES change the run."""

from __future__ import annotations

import os
import random

import pytest

from tests.driver.support import Scenario
from tests.driver.test_crash_matrix import DRIVER_POINTS, rerun_if_needed
from tests.driver.test_recovery import handles_of, wait_not_ongoing
from twopc.control import ControlClient

pytestmark = pytest.mark.integration

RECOVERY_POINTS = ["after_record", "after_rollforward", "after_outcome", "during_sweep"]


def test_random_schedules(scenario: Scenario, control: ControlClient) -> None:
    seed = int(os.environ.get("TWOPC_RANDOM_SEED", "20261122"))
    batches = int(os.environ.get("TWOPC_RANDOM_BATCHES", "24"))
    rng = random.Random(seed)
    scenario.rows = 3
    log: list[str] = []
    for n in range(batches):
        batch = str(n)
        point = rng.choice([*DRIVER_POINTS, None, None])
        recovery_point = rng.choice([*RECOVERY_POINTS, None, None, None]) if point else None
        timeout = point in ("after_intent", "after_endtxn_1") and rng.random() < 0.3
        orphans = rng.random() < 0.3
        log.append(f"batch {batch}: {point} / {recovery_point} timeout={timeout} orphans={orphans}")
        txns = [scenario.txn(batch, p) for p in range(scenario.partitions)]
        if orphans:
            txns.append(scenario.txn(batch, 0, attempt=1, tag="-orphan"))
        written = scenario.write(batch, txns, timeout_ms=4000 if timeout else None)
        results = written[:scenario.partitions]
        out = scenario.drive("commit", batch, results,
                             crash_at=f"coordinator.{point}" if point else None,
                             margin_ms=200 if timeout else 2000)
        assert bool(out.get("killed")) == (point is not None), (log[-1], out)
        if timeout:
            wait_not_ongoing(control, handles_of(results))
        if recovery_point:
            crashed = scenario.drive("recover", batch, crash_at=f"recovery.{recovery_point}")
            assert crashed.get("killed") or crashed.get("rc") == 0, (log[-1], crashed)
        rerun_if_needed(scenario, control, batch)
        assert scenario.driver(control).is_committed(batch), log[-1]
        scenario.expect(batch)
    print("\n".join(log))
    scenario.audit()
