"""Review of issue 30 item 6 (offsets-only batches): `commit_alone` promises "nothing stays open on
the id until its timeout" when a step fails, but its cleanup fence runs only for a
SourceOffsetsError raised inside; a ControlError (a lost answer, retries spent) from
AddOffsetsToTxn/TxnOffsetCommit goes to the outer handler, which raises without the fence. The
offsets' own transaction stays Ongoing (its pending offsets make the group's offsets unstable
for require_stable readers) until its timeout or the next recovery."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.driver.support import Scenario
from tests.driver.test_source_offsets import ends
from twopc.control import ControlClient, TxnState
from twopc.control import faults as f
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.offsets import SourceOffsetsError, alone_id

pytestmark = pytest.mark.integration


def test_a_failed_offsets_only_commit_leaves_nothing_open(
        scenario: Scenario, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    empty = [WriteResult(ResultKind.EMPTY, "0", p, 0) for p in range(scenario.partitions)]
    alone = alone_id(scenario.prefix)
    control = ControlClient({**scenario.broker.config(),
                             "twopc.control.retry.timeout.ms": "2000"})
    try:
        coord = scenario.driver(control)
        # Every answer to TxnOffsetCommit is lost (the broker takes the offsets each time).
        plan = f.FaultPlan((f.Fault("TXN_OFFSET_COMMIT", f.Action.DROP_ANSWER,
                                    transactional_id=alone),))
        with f.injected(plan), pytest.raises(SourceOffsetsError):
            coord.commit("0", empty, ends(group, source, 6, 2))
        assert plan.fired, "the fault never fired"
        desc = control.describe_transactions([alone])[alone]
        assert desc.state is not TxnState.ONGOING, (
            f"{alone} is left {desc.state.value} (epoch {desc.producer_epoch}, timeout "
            f"{desc.timeout_ms} ms) after the offsets-only commit failed")
    finally:
        control.close()
