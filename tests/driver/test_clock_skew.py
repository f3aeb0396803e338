"""An executor whose wall clock is wrong (issue #17, item 6), on the real broker with the real writer.

Clocks cannot be moved here: the task process of one Spark partition reads its wall clock shifted by
TWOPC_CLOCK_SKEW_MS (twopc/crashpoints.py), the driver and the broker keep the real one.
"""

from __future__ import annotations

import socket

import pytest

from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.protocol.handle import WriteResult

pytestmark = pytest.mark.integration


def write_with_one_skewed_executor(scenario: Scenario, batch: str,
                                   skew_ms: int) -> list[WriteResult]:
    skewed = scenario.write_real(batch, [scenario.txn(batch, 0)],
                                 env={"TWOPC_CLOCK_SKEW_MS": str(skew_ms)})
    rest = scenario.write_real(batch, [scenario.txn(batch, p) for p in range(1, scenario.partitions)])
    assert skewed is not None and rest is not None
    return skewed + rest


def test_an_executor_clock_ahead_does_not_stall_every_batch(scenario: Scenario,
                                                            control: ControlClient) -> None:
    # Ahead by more than the timeout minus the margin: taken as evidence of the coordinator's clock,
    # it would leave no batch any time before its transactions time out.
    ahead = scenario.timeout_ms + 10_000
    for batch in ("0", "1"):
        out = scenario.drive("commit", batch, write_with_one_skewed_executor(scenario, batch, ahead),
                             stderr=True)
        assert out["rc"] == 0 and out["ok"]["status"] == "committed", out
        scenario.expect(batch)
        # The operator learns which executor's clock is wrong.
        warning = out["stderr"]
        assert f"host {socket.gethostname()!r}" in warning, warning
        assert f"{scenario.prefix}-0-0" in warning, warning
        assert "ahead" in warning
    scenario.audit()


def test_a_guard_failure_from_clock_evidence_names_the_executor(scenario: Scenario,
                                                                 control: ControlClient) -> None:
    # Behind by more than the timeout: the coordinator's start time is then far after the
    # executor's reading, which cannot be told apart from a coordinator clock running ahead of the
    # driver's. The guard fails (nothing becomes visible) and says which executor's clock it was.
    behind = -(scenario.timeout_ms + 10_000)
    out = scenario.drive("commit", "0", write_with_one_skewed_executor(scenario, "0", behind))
    assert out["rc"] == 3 and out["error"] == "GuardFailed", out
    assert f"host {socket.gethostname()!r}" in out["message"] and "clock" in out["message"], out
    scenario.audit()  # nothing visible, nothing left open
