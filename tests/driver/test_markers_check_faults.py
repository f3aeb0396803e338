"""The markers check's ListOffsets lost, late or unanswered, on the real broker.

After its `committed` record a commit returns only once its markers landed or were released
(docs/design.md section 8): the check's first request is a ListOffsets of the batch's partitions.
That request can be lost like any other: never sent, answered but the answer lost, late, or not
answered within the check's whole budget (its window plus 1 s). None of these may pass a commit
whose markers are not proven, nor fail or hold one whose markers landed: a lost request is
retried, and what stays unanswered is judged (DescribeTransactions, DescribeProducers) as a
leader that does not answer is.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.driver import stranded
from twopc.driver.coordinator import CommitStatus
from twopc.log.session import Session

pytestmark = [pytest.mark.integration]

# (action, delay): lost on the way; answered and the answer lost; half a second late (past the
# base window of 30 ms); lost after 2 s (past the check's budget of its window plus 1 s: its
# partitions go unanswered, to the judging).
CASES = {
    "request-lost": (f.Action.DROP_REQUEST, 0.0),
    "answer-lost": (f.Action.DROP_ANSWER, 0.0),
    "late": (f.Action.DELAY, 0.5),
    "never-answered": (f.Action.DROP_REQUEST, 2.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_commit_whose_markers_check_request_is_lost_or_late_still_proves_its_markers(
        scenario: Scenario, control: ControlClient, case: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    action, delay = CASES[case]
    scenario.partitions = 3
    results = scenario.write("0")
    coord = scenario.driver(control)
    # The commit's first ListOffsets is the markers check's (the writes are done).
    judged: list[int] = []
    judge = stranded._judge_and_release

    def watched(call: Any, suspects: Any, *args: Any) -> None:
        judged.append(len(suspects))
        judge(call, suspects, *args)

    monkeypatch.setattr(stranded, "_judge_and_release", watched)
    plan = f.FaultPlan((f.Fault("LIST_OFFSETS", action, count=1, delay_s=delay),))
    with f.injected(plan):
        report = coord.commit("0", results)
    assert plan.fired, "no ListOffsets was sent: the markers were not checked"
    # Retried or late, the answer came: nothing to judge. Never answered: judged, not passed.
    assert bool(judged) is (case == "never-answered"), judged
    assert report.status is CommitStatus.COMMITTED, report
    assert Session(coord.log).state.stranded == {}, "markers that landed were held"
    scenario.expect("0")
    scenario.audit()
