"""The core end to end on the real writer: every handle comes from twopc.writer.write_partition (in
task processes, tests/driver/task.py), not from the precommit stand-in. A partly committed batch is
repaired by a re-run whose rows come in another order (the writer's order-insensitive checksum
proves it is the same data), then the next batch commits. (The writer's crash points are in
test_crash_matrix.py.)"""

from __future__ import annotations

import pytest

from tests.driver.support import Scenario
from tests.driver.test_recovery import handles_of, wait_not_ongoing
from twopc.control import ControlClient
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration

def test_real_writer_end_to_end_with_a_repaired_rerun(scenario: Scenario,
                                                      control: ControlClient) -> None:
    long = scenario.write_real("0", [scenario.txn("0", p) for p in range(3)])
    short = scenario.write_real("0", [scenario.txn("0", 3)], timeout_ms=4000)
    assert long is not None and short is not None
    # EndTxn order: the first alone, the middle ones, then the last (the short one): die before it.
    out = scenario.drive("commit", "0", long + short,
                         crash_at="coordinator.after_endtxn_n_minus_1", margin_ms=200)
    assert out == {"killed": True}
    wait_not_ongoing(control, handles_of(short))  # partition 3 aborted by its timeout
    coord = scenario.driver(control)
    [batch] = coord.recover().batches
    assert batch.outcome is BatchOutcome.PARTIAL
    assert (batch.committed_partitions, batch.lost_partitions) == ([0, 1, 2], [3])
    assert not coord.is_committed("0")
    # The re-run delivers the same rows in reverse order: same checksums, so the visible
    # partitions are duplicates and only partition 3 commits.
    rerun = scenario.write_real("0", [{**scenario.txn("0", p), "ids": scenario.ids("0", p)[::-1]}
                                      for p in range(scenario.partitions)])
    assert rerun is not None
    old = {h.task_partition: h.checksum for h in handles_of(long)}
    assert all(h.checksum == old[h.task_partition] for h in handles_of(rerun)
               if h.task_partition in old)
    report = coord.commit("0", rerun)
    assert report.status == "repaired" and len(report.duplicates) == 3, report
    assert len(report.committed) == 1
    nxt = scenario.write_real("1")
    assert nxt is not None
    assert coord.commit("1", nxt).status == "committed"
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()
