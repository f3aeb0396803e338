"""The markers check's ListOffsets lost, late or failing past its budget, on the real broker.

After its `committed` record a commit returns only once its markers landed or were released
(docs/design.md section 8): the check's first request is a ListOffsets of the batch's partitions
(in a commit, only the markers check sends ListOffsets). That request can be lost like any other:
never sent, answered but the answer lost, late, or failing only after the check's retry budget
(its window plus 1 s). None of these may fail or hold a commit whose markers landed: the check
asks again, and a partition still unanswered is judged (DescribeTransactions, then a second
ListOffsets) as one whose leader does not answer is. (A request that is never answered at all
holds the check up to the connection's request timeout, 30 s by default.) That the check does not
pass markers that did not land is the stranded suites' (tests/driver/test_stranded*.py, with
markers really lost on a killed broker).
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

# (action, delay): lost on the way; answered and the answer lost (each asked again: by the
# retry, or by the check's own polling); half a second late (past the base window of 30 ms);
# failing after 2 s, past the retry budget of the window plus 1 s: not retried, its partitions
# go unanswered, to the judging.
CASES = {
    "request-lost": (f.Action.DROP_REQUEST, 0.0),
    "answer-lost": (f.Action.DROP_ANSWER, 0.0),
    "late": (f.Action.DELAY, 0.5),
    "lost-past-budget": (f.Action.DROP_REQUEST, 2.0),
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
    # Asked again or late, the answer came: nothing to judge. Lost past the budget: judged.
    assert bool(judged) is (case == "lost-past-budget"), judged
    assert report.status is CommitStatus.COMMITTED, report
    assert Session(coord.log).state.stranded == {}, "markers that landed were held"
    scenario.expect("0")
    scenario.audit()
