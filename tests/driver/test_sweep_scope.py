"""Which open ids a commit's orphan sweep sees (issue 34 item 3), against a real broker.

A broker answers ListTransactions by scanning every transactional id it knows, so a commit
describes its batch's own pool instead (its Spark partitions x the slots, and the offsets id),
and lists the whole pool once `full_sweep_interval_ms` has passed since this process's last
listing (`pool.full_sweep_due`). Proven here: a losing attempt inside the batch's pool is fenced
by the commit that describes it, a zombie outside it by the next commit past the interval (or by
every commit with an interval of 0), and a sweep whose request gets no answer loses nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pytest
from twopc_testing.kafka_tools import abort_hanging

from tests.driver.support import Scenario
from twopc.control import ControlClient, ControlError, TxnState
from twopc.ops.audit import wait_until_stable

pytestmark = pytest.mark.integration

INTERVAL_MS = 600_000
# Long enough that the broker never aborts a zombie or an orphan itself: only twopc may.
LONG_TIMEOUT_MS = 120_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


@contextmanager
def listings(control: ControlClient) -> Iterator[list[object]]:
    """The ListTransactions requests `control` sends meanwhile."""
    sent: list[object] = []
    plain = control.start_list_transactions

    def counted(*args: Any, **kw: Any) -> Future[Any]:
        sent.append(args)
        return plain(*args, **kw)

    control.start_list_transactions = counted  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        control.start_list_transactions = plain  # type: ignore[method-assign]


def _open(control: ControlClient, tid: str) -> bool:
    return control.describe_transactions([tid])[tid].state is TxnState.ONGOING


def _lost_attempt(scenario: Scenario, batch: str, p: int, attempt: int) -> str:
    [lost] = scenario.write(batch, [scenario.txn(batch, p, attempt=attempt, tag="-lost")],
                            timeout_ms=LONG_TIMEOUT_MS)
    assert lost.handle is not None
    return lost.handle.transactional_id


@pytest.mark.all_variants
def test_a_commit_describes_its_pool_and_a_later_full_sweep_fences_the_rest(
        scenario: Scenario, control: ControlClient) -> None:
    clock = Clock()
    coord = scenario.driver(control, full_sweep_interval_ms=INTERVAL_MS, sweep_clock_ms=clock)
    with listings(control) as sent:
        # The process's first sweep lists the whole pool.
        assert coord.commit("0", scenario.write("0")).status == "committed"
        assert len(sent) == 1
        scenario.expect("0")

        # Batch 1: a losing attempt of its partition 1, and a zombie of partition 9, outside the
        # batch's 4 partitions (an earlier batch's task, still running).
        results = scenario.write("1")
        inside = _lost_attempt(scenario, "1", 1, attempt=1)
        zombie = _lost_attempt(scenario, "0", 9, attempt=0)
        clock.now_ms += INTERVAL_MS - 1
        report = coord.commit("1", results)
        assert len(sent) == 1, "a commit within the interval listed the whole pool"
        assert report.status == "committed" and report.orphans == (inside,)
        assert not _open(control, inside), f"the losing attempt {inside} is still open"
        assert _open(control, zombie)  # outside the described pool: left to the full sweep
        scenario.expect("1")

        # Past the interval: the next commit lists the whole pool and fences the zombie.
        clock.now_ms += 1
        report = coord.commit("2", scenario.write("2"))
        assert len(sent) == 2
        assert report.status == "committed" and report.orphans == (zombie,)
        assert not _open(control, zombie), f"the zombie {zombie} is still open"
        scenario.expect("2")
    scenario.audit()


def test_an_interval_of_zero_lists_at_every_commit(scenario: Scenario,
                                                   control: ControlClient) -> None:
    """`twopc.fullSweepIntervalMs` 0: every commit lists the whole pool, and fences a zombie
    outside its batch's pool at once."""
    coord = scenario.driver(control, full_sweep_interval_ms=0)
    with listings(control) as sent:
        assert coord.commit("0", scenario.write("0")).status == "committed"
        results = scenario.write("1")
        zombie = _lost_attempt(scenario, "0", 9, attempt=0)
        report = coord.commit("1", results)
    assert len(sent) == 2
    assert report.orphans == (zombie,) and not _open(control, zombie)
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


def test_the_described_pool_covers_every_slot_and_the_offsets_id(
        scenario: Scenario, control: ControlClient) -> None:
    """A losing attempt in the pool's last slot of the batch's last partition is in the described
    pool; one in a slot beyond the setting (left by a run with more slots) is the full sweep's."""
    clock = Clock()
    coord = scenario.driver(control, full_sweep_interval_ms=INTERVAL_MS, sweep_clock_ms=clock,
                            slots=3)
    with listings(control) as sent:
        assert coord.commit("0", scenario.write("0")).status == "committed"
        scenario.expect("0")
        results = scenario.write("1")
        last = scenario.partitions - 1
        [lost] = scenario.write("1", [scenario.txn("1", last, slot=2, tag="-lost")],
                                timeout_ms=LONG_TIMEOUT_MS)
        assert lost.handle is not None
        beyond = scenario.write("1", [scenario.txn("1", 0, slot=3, tag="-beyond")],
                                timeout_ms=LONG_TIMEOUT_MS)[0].handle
        assert beyond is not None
        report = coord.commit("1", results)
        assert len(sent) == 1
        assert report.orphans == (lost.handle.transactional_id,)
        assert _open(control, beyond.transactional_id)
        clock.now_ms += INTERVAL_MS
        report = coord.commit("2", scenario.write("2"))
        assert len(sent) == 2
        assert report.orphans == (beyond.transactional_id,)
    scenario.expect("1")
    scenario.expect("2")
    scenario.audit()


@pytest.mark.parametrize("lost", ["description", "listing"])
def test_a_sweep_without_an_answer_leaves_the_batch_to_the_next_call(
        lost: str, scenario: Scenario, control: ControlClient) -> None:
    """The sweep's request (the pool's DescribeTransactions, or the whole pool's ListTransactions
    when a listing is due) gets no answer after the EndTxns committed: the call fails before its
    outcome record, and Spark's retry of commit() settles the open intent (the transactions are
    committed), lists the whole pool and fences the losing attempt."""
    clock = Clock()
    coord = scenario.driver(control, full_sweep_interval_ms=INTERVAL_MS, sweep_clock_ms=clock)
    assert coord.commit("0", scenario.write("0")).status == "committed"
    scenario.expect("0")
    results = scenario.write("1")
    lost_attempt = _lost_attempt(scenario, "1", 2, attempt=1)
    if lost == "listing":
        clock.now_ms += INTERVAL_MS
    name = "start_open_among" if lost == "description" else "start_list_transactions"
    plain = getattr(control, name)

    def unanswered(*args: Any, **kw: Any) -> Future[Any]:
        failed: Future[Any] = Future()
        failed.set_exception(ControlError("no answer from the coordinator (injected)"))
        return failed

    setattr(control, name, unanswered)
    try:
        with pytest.raises(ControlError, match="injected"):
            coord.commit("1", results)
    finally:
        setattr(control, name, plain)
    assert _open(control, lost_attempt)
    report = coord.commit("1", results)
    assert report.status == "already_committed" and report.orphans == (lost_attempt,)
    assert not _open(control, lost_attempt)
    scenario.expect("1")
    scenario.audit()


@pytest.mark.parametrize("ended_by", ["its-timeout", "an-operator-abort"])
def test_an_orphan_that_ends_between_the_description_and_its_fence(
        ended_by: str, scenario: Scenario, control: ControlClient) -> None:
    """The pool's description names a losing attempt open; before the commit fences it, the
    attempt ends on its own: its transaction times out (the broker aborts it), or an operator
    aborts it (`kafka-transactions.sh abort`: ABORT markers on its partitions, the coordinator
    still shows it Ongoing). The commit still records it as an orphan and fences it (a fence of an
    id that is no longer open is harmless), and nothing of it becomes visible."""
    clock = Clock()
    coord = scenario.driver(control, full_sweep_interval_ms=INTERVAL_MS, sweep_clock_ms=clock)
    assert coord.commit("0", scenario.write("0")).status == "committed"
    scenario.expect("0")
    results = scenario.write("1")
    # Long enough to be still open when described on a loaded machine, short for the test.
    timeout_ms = 6000 if ended_by == "its-timeout" else LONG_TIMEOUT_MS
    [lost] = scenario.write("1", [scenario.txn("1", 2, attempt=1, tag="-lost")],
                            timeout_ms=timeout_ms)
    assert lost.handle is not None
    loser = lost.handle
    plain = control.start_open_among

    class EndsOnceAnswered:
        """The description's answer, read (after the commit's EndTxns); then the attempt ends."""

        def __init__(self, asked: Future[list[str]]) -> None:
            self.asked = asked

        def result(self) -> list[str]:
            answer = self.asked.result()
            assert loser.transactional_id in answer  # open when described
            if ended_by == "its-timeout":
                assert _wait_until(lambda: not _open(control, loser.transactional_id), 30), \
                    "the broker did not abort the timed-out attempt"
            else:
                for s in loser.spans:
                    said = abort_hanging(scenario.broker.bootstrap_servers, s.topic, s.partition,
                                         s.first_offset)
                    assert wait_until_stable(scenario.broker.config(), s.topic, 30), said
            return answer

    def then_ended(ids: list[str]) -> EndsOnceAnswered:
        return EndsOnceAnswered(plain(ids))

    fenced: list[str] = []
    plain_fence = control.fence

    def fence(ids: Any, *args: Any, **kw: Any) -> Any:
        fenced.extend(ids)
        return plain_fence(ids, *args, **kw)

    control.start_open_among = then_ended  # type: ignore[method-assign]
    control.fence = fence  # type: ignore[method-assign]
    try:
        report = coord.commit("1", results)
    finally:
        control.start_open_among = plain  # type: ignore[method-assign]
        control.fence = plain_fence  # type: ignore[method-assign]
    assert report.status == "committed" and report.orphans == (loser.transactional_id,)
    assert loser.transactional_id in fenced  # fenced, though it had ended
    assert not _open(control, loser.transactional_id)
    scenario.expect("1")
    scenario.audit()


def _wait_until(done: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.2)
    return done()
