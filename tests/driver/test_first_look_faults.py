"""The first look's own requests lost, on the real broker (issue 30, item 7).

The first check after a restart proves the newest committed batch from the log (a read_committed
Fetch per span; docs/design.md section 8). Those Fetches can be lost like any request: never sent,
answered but the answer lost, or late. A look the log did not answer must not pass as proof, nor
be dropped: the batch is held, and a later check proves it and lets it go. A late answer is still
an answer.

The committed batch comes from a real commit whose driver process was SIGKILLed between its
`committed` record and its own check (the crash point `stranded.before_check`): no process has
looked at it.
"""

from __future__ import annotations

import pytest
from twopc_testing.kafka_tools import abort_hanging

from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.errors import StrandedCommitAborted
from twopc.log.session import Session

pytestmark = [pytest.mark.integration, pytest.mark.all_variants]


@pytest.mark.parametrize("action", [f.Action.DROP_REQUEST, f.Action.DROP_ANSWER, f.Action.DELAY])
def test_a_first_look_whose_fetch_is_lost_holds_the_batch_until_a_later_look_proves_it(
        scenario: Scenario, control: ControlClient, action: f.Action) -> None:
    scenario.partitions = 2
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="stranded.before_check") == {
        "killed": True}
    scenario.expect("0")
    ids = {r.handle.transactional_id for r in results if r.handle is not None}
    coord = scenario.driver(control)
    # Lost: every Fetch (and each retry) within the look's budget; late: 0.5 s, then answered.
    fault = f.Fault("FETCH", action, delay_s=0.5 if action is f.Action.DELAY else 0.0)
    with f.injected(f.FaultPlan((fault,))) as plan:
        report = coord.recover()
    assert plan.fired, "no Fetch was sent: the first look did not happen"
    assert not report.stranded.released, report.summary()
    held = set(Session(coord.log).state.stranded)
    if action is f.Action.DELAY:
        assert held == set(), "a late answer proves the batch: nothing to hold"
        return
    # Not proven, not dropped: held, with why; no loss is claimed either.
    assert held == ids, Session(coord.log).state.stranded
    assert all("could not read the log" in h.reason
               for h in Session(coord.log).state.stranded.values())
    # The next look (a later check in this process: the batch was not proven) clears it.
    coord.recover()
    assert Session(coord.log).state.stranded == {}
    scenario.audit()


@pytest.mark.parametrize("aborted_outside", [False, True], ids=["healthy", "aborted-outside"])
def test_a_lost_proof_of_a_commits_own_transactions_holds_them_until_a_later_check(
        scenario: Scenario, control: ControlClient, aborted_outside: bool) -> None:
    """The commit's own proof (a Fetch per span of the transactions it committed) lost, every
    try within its budget: the commit cannot say its records ended committed. Not proven, not
    dropped: its ids are held (its source offsets wait), and the next check proves them: a
    healthy commit's hold goes; one aborted from outside before the commit raises its loss
    there, loud, never reported as proven."""
    scenario.partitions = 2
    results = scenario.write("0")
    ids = {r.handle.transactional_id for r in results if r.handle is not None}
    victim = results[1].handle
    assert victim is not None
    if aborted_outside:
        [span] = victim.spans
        abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition,
                      span.first_offset)
    coord = scenario.driver(control)
    with f.injected(f.FaultPlan((f.Fault("FETCH", f.Action.DROP_ANSWER),))) as plan:
        report = coord.commit("0", results)
    assert plan.fired, "no Fetch was sent: the commit proved nothing"
    assert report.status == "committed"
    assert set(Session(coord.log).state.stranded) == ids
    assert all("could not read the log" in h.reason
               for h in Session(coord.log).state.stranded.values())
    if aborted_outside:
        with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
            scenario.driver(control).recover()
        assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}
        scenario.driver(control).recovery.acknowledge_loss("0", "test: aborted from outside")
        scenario.driver(control).recover()
        scenario.expect("0", partitions=[0])
    else:
        scenario.driver(control).recover()
        scenario.expect("0")
    assert Session(coord.log).state.stranded == {}
    scenario.audit()
