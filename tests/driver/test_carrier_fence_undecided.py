"""Review of issue 30 item 2 (the carrier rule in recovery, settle.py `_decide_carriers`): when
one of the batch's other transactions is proven aborted and another is not proven (the log check
times out), `carrier_action` says FENCE, but the batch's outcome is UNDECIDED, so no outcome record
names the carrier; settle then calls `fence_named` on it, which the call's door refuses
(ProtocolViolation). Recovery fails with an internal error instead of UndecidedError naming what
cannot be proven (and its report is lost)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.driver.support import Scenario, wait_not_ongoing
from tests.driver.test_source_offsets import ends
from twopc.control import ControlClient
from twopc.errors import ProtocolViolation, UndecidedError

pytestmark = pytest.mark.integration


def test_carrier_to_fence_in_an_undecided_batch_is_an_undecided_error(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    # An outside transaction holds back the last stable offset of Spark partition 1's partition,
    # below where batch 0 writes there: the log check of partition 1's handle cannot settle.
    p1 = scenario.txn("0", 1)
    outside = Producer({"bootstrap.servers": scenario.broker.bootstrap_servers,
                        "transactional.id": f"outside-{uuid.uuid4().hex[:6]}",
                        "transaction.timeout.ms": 120000})
    outside.init_transactions(30)
    outside.begin_transaction()
    outside.produce(p1["topic"], b"outside", partition=p1["partition"])
    outside.flush(30)
    try:
        results = scenario.write("0")
        handles = [r.handle for r in results if r.handle is not None]
        assert scenario.drive("commit", "0", results, crash_at="coordinator.after_intent",
                              offsets=ends(group, source, 6, 2).to_obj()) == {"killed": True}
        # Someone outside fences Spark partitions 0 and 1 (their transactions end aborted);
        # 2 is rolled forward, 3 (the carrier) is held back.
        assert all(r.fenced for r in control.fence(
            [handles[0].transactional_id, handles[1].transactional_id]).values())
        wait_not_ongoing(control, handles[:2])
        coord = scenario.driver(control, settle_wait_ms=3000)
        try:
            coord.recover()
        except UndecidedError:
            pass  # the expected report: partition 1's fate cannot be proven
        except ProtocolViolation as exc:
            pytest.fail(f"recovery raised ProtocolViolation instead of UndecidedError: {exc}")
        else:
            pytest.fail("recovery reported the batch settled")
    finally:
        outside.abort_transaction(30)
