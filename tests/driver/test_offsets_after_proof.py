"""Issue 30, item 2, the case the torture suite found (kafka4-tv2, seed 20261134): the group's
offsets moved past records that a broker kill and an outside abort then lost.

The offsets used to ride in one of the batch's own transactions (the "carrier"), committed once
every other EndTxn had *answered* committed. An answer is the coordinator's decision, not the
markers: a broker killed mid-commit can drop them (tests/broker/test_restart_mid_commit.py), and
whatever then ends the stuck transaction other than a commit (a release cut short and fenced by an
operator) ends the committed records as aborted. The group had already moved past their source
records: a consumer failing over from the group skips them.

What must hold (docs/design.md section 9): the group's offsets move only once every batch up to
the one whose end offsets they take is proven visible (its markers landed, or its release proven
committed), in a transaction of their own after the batch's outcome record, and recorded; a
stranded batch holds every later batch's offsets back until its hold clears or its loss is
acknowledged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from twopc_testing.offsets import stable_group_offsets

from checkpoint import open_log
from tests.broker.test_restart_mid_commit import _stranded_commit
from tests.driver.support import Scenario
from tests.driver.test_release_cut_short import (
    _committed_in_log,
    _cut_short_in_process,
    _observe_half_done,
)
from tests.driver.test_source_offsets import ends
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.errors import StrandedCommitAborted
from twopc.protocol.log_records import OffsetsCommitted, from_body
from twopc.protocol.offsets import alone_id

pytestmark = pytest.mark.integration


@pytest.fixture
def faulty(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    """A control client whose retries give up within 1 s (a dropped request fails fast)."""
    with ControlClient(broker.config(**{"twopc.control.retry.timeout.ms": "1000"})) as client:
        yield client


def _group(scenario: Scenario, group: str, source: str,
           wait_s: float = 30) -> dict[tuple[str, int], int]:
    return stable_group_offsets(scenario.broker.config(), group, [(source, 0), (source, 1)],
                                wait_s)


def _offsets_end_txn_answers_lost(scenario: Scenario, count: int | None) -> f.FaultPlan:
    """The answers of the offsets' own EndTxn dropped: `count` of them (None: every one)."""
    return f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_ANSWER, count=count,
                                transactional_id=alone_id(scenario.prefix)),))


def _moves(scenario: Scenario) -> list[str]:
    return [r.batch for r in (from_body(x.body) for x in open_log(scenario.log_url).records())
            if isinstance(r, OffsetsCommitted)]


@pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")
def test_the_group_never_moves_past_a_committed_batch_that_an_outside_abort_lost(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        faulty: ControlClient, control: ControlClient) -> None:
    """Batch 0 is committed in the log, its markers dropped by a broker kill; its release is cut
    short (EndTxn dropped) and an operator fences the id: batch 0's records end aborted. Batch 1
    then commits, its EndTxns all answering committed. The group must not move to batch 1's end
    (it would skip batch 0's source records): the check raises the loss, loud, before any offsets
    move; once the operator acknowledges the loss, the offsets move."""
    stuck = _stranded_commit(broker, make_topic)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty)
    _cut_short_in_process(scenario, faulty, stuck)
    _observe_half_done(broker, faulty, stuck, {"variant": broker.variant})
    assert control.fence([stuck.transactional_id])[stuck.transactional_id].fenced
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    never = {(source, 0): -1, (source, 1): -1}
    coord = scenario.driver(control)
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        coord.commit("1", scenario.write("1"), ends(group, source, 10, 7))
    assert _group(scenario, group, source) == never, (
        "the group moved to batch 1's end though batch 0's committed records were aborted")
    assert _moves(scenario) == []
    # The operator accepts the loss of batch 0 (the records are gone either way): batch 1's
    # offsets, decided with it, move with the next call that proves its markers.
    coord.recovery.acknowledge_loss("0", "test: batch 0 lost to an outside abort")
    coord.recover()
    assert _group(scenario, group, source) == {(source, 0): 10, (source, 1): 7}
    assert _moves(scenario) == ["1"]
    scenario.expect("1")
    scenario.audit()


@pytest.mark.all_variants
def test_offsets_move_only_after_the_batch_is_proven_visible(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    """The driver is SIGKILLed right after the batch's `committed` record, before its markers are
    checked: the group has not moved. Recovery checks the markers, then moves it, once."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = ends(group, source, 20, 9)
    assert scenario.drive("commit", "0", scenario.write("0"), offsets=offsets.to_obj(),
                          crash_at="coordinator.after_committed_record") == {"killed": True}
    # The offsets wait in their own transaction, open (begun before the intent): the group's
    # committed offsets have not moved.
    with pytest.raises(AssertionError, match="pending"):
        _group(scenario, group, source, wait_s=1)
    held = control.group_offsets(group, [(source, 0), (source, 1)], require_stable=False)
    assert {tp: p.offset for tp, p in held.partitions.items()} == {(source, 0): -1,
                                                                   (source, 1): -1}
    scenario.driver(control).recover()
    assert _group(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
    assert _moves(scenario) == ["0"]
    scenario.driver(control).recover()  # nothing left to move: no second transaction
    assert _moves(scenario) == ["0"]
    scenario.expect("0")
    scenario.audit()


def test_a_lost_answer_of_the_offsets_end_txn_is_redone_by_the_next_call(
        scenario: Scenario, control: ControlClient, faulty: ControlClient,
        make_topic: Callable[..., str]) -> None:
    """The offsets' own EndTxn commits on the broker but its answer never comes (every answer, so
    that the call's second attempt fails too): the commit call fails loud (the batch is
    committed, its offsets not recorded as moved), and the next call (a re-run of the batch, or
    recovery) commits them again: same offsets, no harm."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = ends(group, source, 8, 3)
    plan = _offsets_end_txn_answers_lost(scenario, count=None)
    with f.injected(plan), pytest.raises(Exception, match="source offsets"):
        scenario.driver(faulty).commit("0", scenario.write("0"), offsets)
    assert plan.fired
    assert _moves(scenario) == []
    scenario.driver(control).recover()
    assert _group(scenario, group, source) == {(source, 0): 8, (source, 1): 3}
    assert _moves(scenario) == ["0"]
    scenario.expect("0")
    scenario.audit()


def test_a_lost_answer_once_is_committed_again_in_the_same_call(
        scenario: Scenario, control: ControlClient, faulty: ControlClient,
        make_topic: Callable[..., str]) -> None:
    """The offsets' EndTxn answer is lost once: the call commits them again in a new transaction
    (the same offsets) and returns committed, the move recorded once."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    plan = _offsets_end_txn_answers_lost(scenario, count=1)
    with f.injected(plan):
        report = scenario.driver(faulty).commit("0", scenario.write("0"), ends(group, source, 4, 6))
    assert plan.fired and report.status == "committed"
    assert _group(scenario, group, source) == {(source, 0): 4, (source, 1): 6}
    assert _moves(scenario) == ["0"]
    scenario.expect("0")
    scenario.audit()


def test_a_redo_never_moves_the_group_back(scenario: Scenario, control: ControlClient,
                                           make_topic: Callable[..., str]) -> None:
    """A call moved the group to batch 1's end and died before recording it; a later call, finding
    batch 1 unproven for a while (a partition unreadable), plans batch 0's offsets: the redo reads
    the group first (after its InitProducerId) and commits nothing older than what it holds."""
    from twopc.driver.source_offsets import commit_alone

    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control)
    assert coord.commit("0", scenario.write("0"), ends(group, source, 5, 5)).status == "committed"
    assert coord.commit("1", scenario.write("1"), ends(group, source, 20, 9)).status == "committed"
    older = ends(group, source, 5, 5).deferred_on(scenario.prefix)
    assert commit_alone(control, "0", older, 5.0, confirm_owner=lambda: None) is False
    assert _group(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
    newer = ends(group, source, 30, 9).deferred_on(scenario.prefix)
    assert commit_alone(control, "2", newer, 5.0, confirm_owner=lambda: None) is True
    assert _group(scenario, group, source) == {(source, 0): 30, (source, 1): 9}
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()
