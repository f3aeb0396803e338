"""Found by the torture suite (issue 30, item 7; kafka4-tv2, the covering schedule of seed
20261122, batches 4, 11 and 15): with twopc.commitSourceOffsets, recovery's own sweep fences the
carrier of the intent it is rolling forward.

A driver dies right after its intent (`coordinator.after_intent`): every transaction of the batch
is Ongoing, pass 1 says roll forward for each. Since issue 30, item 2, recovery holds the carrier
(the batch's last transaction, which holds the source offsets) back until the others are proven
committed (settle.py, `held_carriers`). But the sweep's protected ids are only the ids it rolls
forward now (`roll`) and the held stranded ids: the held-back carrier is open, named by no
`RollForward` yet, so the sweep names it an orphan and fences it. Its EndTxn then answers
PRODUCER_FENCED, the log check proves it aborted, and the batch whose decision was commit ends
PARTIAL: the carrier's records are aborted and the group does not move. A deterministic re-run
repairs it; a re-run that reads other data raises DataLossError and the operator must accept the
loss of records twopc had decided to commit. Without source offsets the same recovery rolls the
whole batch forward.

Expected: an intent found open with every transaction alive is rolled forward whole, the carrier
last, and the group moves to the batch's end offsets.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from twopc_testing.offsets import stable_group_offsets

from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration


def test_recovery_rolls_forward_an_intent_with_offsets_without_fencing_its_carrier(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = SourceOffsets(group, ((source, 0, 20), (source, 1, 9)))
    results = scenario.write("0")
    carrier = results[-1].handle
    assert carrier is not None
    assert scenario.drive("commit", "0", results, offsets=offsets.to_obj(),
                          crash_at="coordinator.after_intent") == {"killed": True}
    report = scenario.driver(control).recover()
    batch = report.batches[0]
    assert carrier.transactional_id not in report.orphans_fenced, (
        f"recovery's sweep fenced the held-back carrier {carrier.transactional_id} of the intent "
        f"it rolls forward: {report.summary()}")
    assert batch.outcome is BatchOutcome.COMMITTED, report.summary()
    assert stable_group_offsets(scenario.broker.config(), group, [(source, 0), (source, 1)]) == {
        (source, 0): 20, (source, 1): 9}
    scenario.expect("0")
    scenario.audit()
