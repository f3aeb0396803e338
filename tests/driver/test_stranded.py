"""Stranded commits (twopc/driver/stranded.py): the pure decision, exhaustively; and recover() releasing a
batch the Coordinator committed whose markers a broker SIGKILL dropped, against the real broker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint import open_log
from tests.broker.test_restart_mid_commit import _stranded_commit
from tests.driver.support import DriverUnderTest
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TransactionDescription, TxnState
from twopc.control.logcheck import LogCheckRequest, LogCheckResult, LogOutcome, UnknownReason
from twopc.driver.stranded import (
    StrandedReport,
    _latest_first_offsets,
    prove_holds,
    release_stranded_commits,
)
from twopc.errors import CommitUnverified, ResolutionRefused, StrandedCommitAborted
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.holds import (
    HoldProof,
    committed_handles,
    hold_changes,
    marker_window_s,
    proof_of,
    stuck_spans,
    to_check,
    to_prove,
    unreadable_spans,
)
from twopc.protocol.log_records import Committed, LogRecord, Prepared, Released, Stranded, from_body, to_body
from twopc.protocol.state import BatchState, BatchStatus, LogState, TxnKey, fold, txn_key
from twopc.protocol.verdicts import Fate, StrandedFate, Verdict, judge

PID, EPOCH = 4000, 7


def _handle(spans: tuple[PartitionSpan, ...] = (PartitionSpan("t", 0, 10, 14, 5),),
            tid: str = "q-0-0") -> Handle:
    return Handle(tid, PID, EPOCH, spans, 5, "c", 0, 60000, 0, 0, 0)


def _desc(state: TxnState, pid: int = PID, epoch: int = EPOCH) -> TransactionDescription:
    return TransactionDescription("q-0-0", state, pid, epoch, 60000, 0, ())


def test_nothing_stuck_is_settled_whatever_the_coordinator_says() -> None:
    for state in TxnState:
        assert judge(_handle(), _desc(state), []).fate is StrandedFate.SETTLED
    assert judge(_handle(), None, []).fate is StrandedFate.SETTLED


@given(st.sampled_from(list(TxnState)), st.sampled_from([PID, PID + 1]),
       st.integers(EPOCH - 1, EPOCH + 2), st.booleans())
def test_judge_table(state: TxnState, pid: int, epoch: int, known: bool) -> None:
    h = _handle()
    desc = _desc(state, pid, epoch) if known else None
    v = judge(h, desc, list(h.spans))
    newer = epoch > EPOCH
    if desc is None or state is TxnState.UNKNOWN_ID or pid != PID or epoch < EPOCH:
        expected = StrandedFate.CANNOT  # another producer id's markers cannot end it
    elif state is TxnState.ONGOING:
        expected = StrandedFate.LIVE_WRITER if newer else StrandedFate.CANNOT
    elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                   TxnState.PREPARE_EPOCH_FENCE):
        expected = StrandedFate.WAIT
    elif state is TxnState.COMPLETE_COMMIT or (
            newer and state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT)):
        expected = StrandedFate.RELEASE
    else:
        expected = StrandedFate.CANNOT
    assert v.fate is expected, v
    assert v.reason  # every verdict but "settled" says why


def test_a_live_writer_is_never_released() -> None:
    h = _handle()
    for epoch in (EPOCH + 1, EPOCH + 5):
        v = judge(h, _desc(TxnState.ONGOING, epoch=epoch), list(h.spans))
        assert v.fate is StrandedFate.LIVE_WRITER


@given(lso=st.integers(0, 30), holder=st.sampled_from([None, (PID, 10), (PID, 9), (PID + 1, 10)]))
def test_stuck_spans_needs_our_own_open_transaction_at_the_first_offset(
        lso: int, holder: tuple[int, int] | None) -> None:
    span = PartitionSpan("t", 0, 10, 14, 5)
    h = _handle((span, PartitionSpan("u", 1, 3, 3, 1)))
    open_at = {("t", 0): frozenset() if holder is None else frozenset([holder])}
    got = stuck_spans(h, {("t", 0): lso, ("u", 1): 4}, open_at)
    assert got == ([span] if lso <= 10 and holder == (PID, 10) else [])


@given(lso=st.one_of(st.none(), st.integers(0, 30)),
       error=st.sampled_from([None, "TOPIC_AUTHORIZATION_FAILED", "no answer",
                              "UNKNOWN_TOPIC_OR_PARTITION"]),
       state=st.sampled_from(list(TxnState)))
def test_a_partition_that_cannot_be_read_is_never_settled(
        lso: int | None, error: str | None, state: TxnState) -> None:
    span = PartitionSpan("t", 0, 10, None, 5)
    h = _handle((span,))
    lsos = {} if lso is None else {("t", 0): lso}
    errors = {} if error is None else {("t", 0): error}
    why = unreadable_spans(h, lsos, errors)
    maybe_held = lso is None or lso <= 10
    # Unreadable: where the partition may be held back and its producers could not be read
    # (a partition that no longer exists holds nothing back).
    assert bool(why) == (maybe_held and error not in (None, "UNKNOWN_TOPIC_OR_PARTITION"))
    v = judge(h, _desc(state), [], why)
    assert v.fate is (StrandedFate.WAIT if why else StrandedFate.SETTLED)
    if why:
        assert error is not None and error in v.reason
    # Without the last stable offset, the producer states alone decide.
    assert stuck_spans(h, lsos, {("t", 0): {(PID, 10)}}) == ([span] if maybe_held else [])


def test_holds_are_cleared_only_once_every_visible_handle_on_them_was_checked() -> None:
    a0 = _handle(tid="q-0-0")
    a1 = Handle("q-0-0", PID, EPOCH + 3, a0.spans, 5, "c", 0, 60000, 0, 0, 0)  # a later one
    b = Handle("q-1-0", PID + 1, EPOCH, a0.spans, 5, "c", 0, 60000, 1, 0, 0)
    records: list[tuple[int, LogRecord]] = [
        (0, Prepared("1", (a0,))), (1, Committed("1", 0, ())),
        (2, Prepared("2", (a1, b))), (3, Committed("2", 2, ())),
        (4, Released(("1",), ("q-0-0",), ()))]
    state = fold(records)
    # Still stuck: held (no new record, it is held already); another id newly stuck: held.
    assert hold_changes(state, [a0, a1], {"q-0-0": ("1", "failed")}, {}) is None
    assert hold_changes(state, [b], {"q-1-0": ("2", "wait")}, {}) == Stranded(
        (("2", "q-1-0", "wait"),), ())
    # Settled, but only one of the two visible handles on q-0-0 was looked at: still held.
    proven = {"q-0-0": HoldProof.COMMITTED}
    assert to_prove(state, [a0], {}) == ()
    assert hold_changes(state, [a0], {}, proven) is None
    assert to_prove(state, [a0, a1], {}) == ("q-0-0",)
    assert hold_changes(state, [a0, a1], {}, proven) == Stranded((), ("q-0-0",))
    # Settled, but the log does not prove its records committed: never cleared silently.
    for proof in (HoldProof.UNPROVEN, HoldProof.ABORTED):
        assert hold_changes(state, [a0, a1], {}, {"q-0-0": proof}) is None
    assert hold_changes(state, [a0, a1], {}, {}) is None
    # A check of batch 2 alone looks at batch 1 too while it holds q-0-0.
    batches = list(state.batches.values())
    assert [x.batch for x in to_check(batches, {"2"}, state.stranded)] == ["1", "2"]
    assert [x.batch for x in to_check(batches, {"2"}, ())] == ["2"]


RELEASED = frozenset({("t", 0), ("t", 1)})


@given(st.sampled_from(list(TxnState)), st.sampled_from([PID, PID + 1]),
       st.integers(EPOCH - 1, EPOCH + 2),
       st.sets(st.sampled_from([("t", 0), ("t", 1), ("u", 0)])), st.booleans(), st.booleans())
def test_our_release_cut_short_is_finished_never_taken_for_a_live_writer(
        state: TxnState, pid: int, epoch: int, parts: set[tuple[str, int]], recorded: bool,
        stuck: bool) -> None:
    """A release cut short before its EndTxn leaves the id Ongoing at a newer epoch of the same
    producer id on the released partitions: judge says FINISH (commit it at that epoch), whatever
    the spans look like; anything else is judged as before (issue 30, item 1)."""
    h = _handle()
    desc = TransactionDescription("q-0-0", state, pid, epoch, 60000, 0, tuple(sorted(parts)))
    released = RELEASED if recorded else frozenset()
    v = judge(h, desc, list(h.spans) if stuck else [], (), released)
    ours = (recorded and state is TxnState.ONGOING and pid == PID and epoch > EPOCH
            and bool(parts) and parts <= RELEASED)
    if ours:
        assert v.fate is StrandedFate.FINISH and v.end_at == (PID, epoch), v
    else:
        assert v.fate is not StrandedFate.FINISH and v.end_at is None
        assert v == judge(h, desc, list(h.spans) if stuck else [])  # as without a release


def test_released_partitions_are_folded_into_the_hold() -> None:
    h = _handle()
    state = fold([(0, Prepared("1", (h,))), (1, Committed("1", 0, ())),
                  (2, Released(("1",), ("q-0-0",), (("q-0-0", "t", 0),))),
                  (3, Released(("1",), ("q-0-0", "q-9-9"), (("q-0-0", "t", 1),
                                                              ("q-9-9", "x", 5))))])
    assert state.stranded["q-0-0"].released == RELEASED
    assert state.stranded["q-9-9"].released == {("x", 5)}
    cleared = fold([(4, Stranded((), ("q-0-0",)))], "", 0, after=state)
    assert "q-0-0" not in cleared.stranded


@given(st.lists(st.sampled_from(list(Fate)), max_size=4))
def test_a_hold_is_proven_committed_only_by_every_span(fates: list[Fate]) -> None:
    proof = proof_of(Verdict(f) for f in fates)
    if Fate.ABORTED in fates:
        assert proof is HoldProof.ABORTED
    elif fates and set(fates) == {Fate.COMMITTED}:
        assert proof is HoldProof.COMMITTED
    else:
        assert proof is HoldProof.UNPROVEN


def test_committed_handles_takes_the_visible_handles() -> None:
    a, b = _handle(tid="q-0-0"), _handle(tid="q-1-0")
    states = [BatchState("1", BatchStatus.COMMITTED, committed={0: a}),
              BatchState("2", BatchStatus.PARTIAL, committed={1: b}),
              BatchState("3", BatchStatus.PREPARED, intent=(a,)),
              BatchState("4", BatchStatus.ABORTED)]
    assert committed_handles(states) == [("1", a), ("2", b)]


def test_latest_first_offsets_are_those_of_the_batch_handles_given() -> None:
    a = _handle((PartitionSpan("t", 0, 10, None, 5), PartitionSpan("t", 1, 7, None, 1)), "q-0-0")
    b = _handle((PartitionSpan("t", 0, 30, None, 2),), "q-1-0")
    one = BatchState("1", BatchStatus.COMMITTED, 0, 1, intent_seq=0, committed={0: a, 1: b})
    assert _latest_first_offsets(one) == {("t", 0): 30, ("t", 1): 7}
    assert _latest_first_offsets(one) == {("t", 0): 30, ("t", 1): 7}  # from the memo
    # The same batch and intent number in another log (other handles): its own offsets.
    other = BatchState("1", BatchStatus.COMMITTED, 0, 1, intent_seq=0, committed={0: a})
    assert _latest_first_offsets(other) == {("t", 0): 10, ("t", 1): 7}


def test_released_record_round_trip() -> None:
    rec = Released(("3",), ("q-0-0",), (("q-0-0", "t", 1),))
    assert from_body(to_body(rec)) == rec


# ---- against the real broker ----------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")
def test_recover_releases_a_commit_whose_markers_a_broker_kill_dropped(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> None:
    """A transaction committed (EndTxn answered) whose markers a broker SIGKILL dropped, recorded
    in the log as commit() records a batch (intent, then committed); recover() releases it."""
    stuck = _stranded_commit(broker, make_topic)  # retries the kill until markers are dropped
    with ControlClient(broker.config()) as control:
        topic_id = control.topic_ids([stuck.topic])[stuck.topic]
        spans = tuple(PartitionSpan(stuck.topic, p, first, first, 1, topic_id)
                      for p, first in sorted(stuck.first_offsets.items()))
        handle = Handle(stuck.transactional_id, stuck.producer_id, stuck.epoch, spans,
                        len(stuck.ids), "c", 0, 60000, 0, 0, 0)
        prefix = stuck.transactional_id.rsplit("-", 1)[0]  # not of the form prefix-p-slot
        coord = DriverUnderTest(open_log(str(tmp_path / "log")), control, "query", "q", prefix,
                                settle_wait_ms=5000)
        coord.bind()
        session = Session(coord.log)
        intent = session.append(Prepared("0", (handle,)))
        session.append(Committed("0", intent, ()))
        report = coord.recover()
        assert report.stranded.released == (stuck.transactional_id,), report.summary()
        assert not report.stranded.unreleased, report.summary()
        # Recorded before it was done, naming the id and exactly the stuck partitions.
        records = [from_body(r.body) for r in open_log(str(tmp_path / "log")).records()]
        [released] = [r for r in records if isinstance(r, Released)]
        assert released.ids == (stuck.transactional_id,) and released.batches == ("0",)
        assert {(t, p) for _, t, p in released.partitions} == {
            (stuck.topic, p) for p in stuck.stuck}
        # The release's check proves it committed and clears the hold, if the markers land
        # within its wait; else (a loaded machine) the next check does, a record later.
        cleared = Session(coord.log).state.stranded == {}
        again = coord.recover()  # nothing left to release
        assert again.stranded.released == () and not again.stranded.notes
        if not cleared:
            last = from_body(list(open_log(str(tmp_path / "log")).records())[-1].body)
            assert isinstance(last, Stranded) and last.cleared == (stuck.transactional_id,)
        assert Session(coord.log).state.stranded == {}
        last_seq = Session(coord.log).state.last_seq
        coord.recover()  # nothing left: nothing recorded, nothing done
        assert Session(coord.log).state.last_seq == last_seq
    assert wait_until_stable(broker.config(), stuck.topic, 60)
    audit = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    assert audit.passed and audit.records == len(stuck.ids), audit.summary()


class _LogChecks:
    """The control client's log check, answered from a table by first offset (no broker)."""

    def __init__(self, aborted_from: int) -> None:
        self.aborted_from = aborted_from

    def log_check(self, topic: str, partition: int, first_offset: int, producer_id: int,
                  epoch: int, topic_id: object, budget_s: float) -> LogCheckResult:
        if first_offset >= self.aborted_from:
            return LogCheckResult(LogOutcome.ABORTED, detail=f"aborted from offset {first_offset}")
        return LogCheckResult(LogOutcome.COMMITTED)

    def log_checks(self, checks: Sequence[LogCheckRequest], budget_s: float) -> list[LogCheckResult]:
        return [self.log_check(c.topic, c.partition, c.offset, c.producer_id, c.epoch, c.topic_id,
                               budget_s) for c in checks]


def test_a_loss_is_the_handles_with_an_aborted_span_not_every_handle_of_the_id() -> None:
    """An id reused by a later batch holds the handles of both; the later one's records were
    aborted (its stranded commit's release cut short, then fenced from outside), the earlier
    one's are committed. The loss names the later batch only: the earlier one is not lost, and an
    operator acknowledging it would be refused (the torture suite's kafka4-tv2 seed 20261126)."""
    early = Handle("q-2-0", PID, EPOCH, (PartitionSpan("t", 1, 0, 1, 2),), 2, "c", 0, 60000, 2,
                   0, 0)
    late = Handle("q-2-0", PID, EPOCH + 2, (PartitionSpan("t", 1, 3, 4, 2),), 2, "c", 0, 60000,
                  2, 0, 0)
    evidence = prove_holds(cast(ControlClient, _LogChecks(aborted_from=3)),
                           [("0", early), ("1", late)])
    assert evidence.proofs["q-2-0"][0] is HoldProof.ABORTED  # the id's hold stays
    assert set(evidence.aborted) == {txn_key(late)}
    assert "@3" in evidence.aborted[txn_key(late)]


class _FirstLookDoor:
    """A call's door over a folded state, with a control client whose partitions are all stable
    past every span and whose log checks answer from a table (no broker)."""

    def __init__(self, state: LogState, answers: dict[tuple[str, int, int], LogCheckResult]) -> None:
        self._state = state
        self.answers = answers
        self.appended: list[LogRecord] = []
        self.asked = 0
        self.waited = 0
        # Answers from the first wait for stability on (markers that were on their way).
        self.after_wait: dict[tuple[str, int, int], LogCheckResult] = {}
        self.windows: list[tuple[float, frozenset[tuple[str, int]]]] = []  # each wait_stable's
        self.late_once: set[tuple[str, int]] = set()  # not stable yet at the first wait
        self.unanswered_once: set[tuple[str, int]] = set()  # left out of the first wait's answer
        self.acknowledged: dict[str, frozenset[TxnKey]] = {}  # per batch, losses acknowledged
        self.control = self

    def acknowledged_losses(self, batch: str) -> frozenset[TxnKey]:
        return self.acknowledged.get(batch, frozenset())

    @property
    def state(self) -> LogState:
        return self._state

    def append(self, record: LogRecord) -> int:
        self.appended.append(record)
        self._state = fold([(self._state.last_seq + 1, record)], after=self._state)
        return self._state.last_seq

    def wait_stable(self, past: dict[tuple[str, int], int], within_s: float) -> dict[tuple[str, int], int]:
        self.waited += 1
        self.windows.append((within_s, frozenset(past)))
        self.answers.update(self.after_wait)
        if self.waited == 1:  # markers still on their way there (or no answer)
            return {tp: first if tp in self.late_once else first + 100 for tp, first in past.items()
                    if tp not in self.unanswered_once}
        return {tp: first + 100 for tp, first in past.items()}

    def log_checks(self, checks: Sequence[LogCheckRequest], budget_s: float) -> list[LogCheckResult]:
        self.asked += len(checks)
        return [self.answers.get((c.topic, c.partition, c.offset), LogCheckResult(LogOutcome.COMMITTED))
                for c in checks]


_A = Handle("q-0-0", PID, EPOCH, (PartitionSpan("t", 0, 5, 5, 1),), 1, "c", 0, 60000, 0, 0, 0)
_B = Handle("q-1-0", PID + 1, EPOCH, (PartitionSpan("t", 1, 5, 5, 1),), 1, "c", 0, 60000, 1, 0, 0)


def _first_look(answers: dict[tuple[str, int, int], LogCheckResult],
                prove: frozenset[TxnKey] = frozenset({txn_key(_A), txn_key(_B)}),
                acknowledged: frozenset[TxnKey] = frozenset(),
                ) -> tuple[_FirstLookDoor, StrandedReport | StrandedCommitAborted]:
    state = fold([(0, Prepared("1", (_A, _B))), (1, Committed("1", 0, ()))])
    door = _FirstLookDoor(state, answers)
    door.acknowledged["1"] = acknowledged
    batches = list(state.batches.values())
    try:
        return door, release_stranded_commits(cast(Any, door), batches, wait_ms=1000,
                                              grace_ms=100, prove=prove)
    except StrandedCommitAborted as exc:
        return door, exc


@pytest.mark.parametrize(("answer", "held", "raises"), [
    (LogCheckResult(LogOutcome.COMMITTED), False, False),
    (LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5"), True, True),
    (LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR, "leader unknown"), True, False),
    (LogCheckResult(LogOutcome.NOT_YET_STABLE), True, False),
    (LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.BELOW_LOG_START, "retention"), False, False),
], ids=["committed", "aborted", "fetch-failed", "not-yet-stable", "records-gone"])
def test_a_first_look_proves_from_the_log_holds_what_it_cannot_yet_and_raises_a_loss(
        answer: LogCheckResult, held: bool, raises: bool) -> None:
    """The first look at a batch (its own call may have died before its check) asks the log of
    every span: committed passes; aborted is held and raised (loud, at every later check too);
    an answer the log cannot give yet (a fetch failing, not stable) is held, so that later checks
    prove it (never dropped because a later batch became the newest); records the log no longer
    has cannot be proven either way and are not held (a hold would block the offsets forever)."""
    door, out = _first_look({("t", 1, 5): answer})
    assert door.asked == 2  # each span once, in one round of log checks
    assert isinstance(out, StrandedCommitAborted) is raises
    holds = [r for r in door.appended if isinstance(r, Stranded)]
    assert (("q-1-0" in door.state.stranded) is held), holds
    assert "q-0-0" not in door.state.stranded
    if not raises:
        assert isinstance(out, StrandedReport)
        assert out.looked == (("1", txn_key(_A)), ("1", txn_key(_B)))


def test_a_proof_asks_only_for_the_transactions_named() -> None:
    """A batch proven earlier in the call gains a repair's transaction: only that one is asked
    about, and its loss is raised though the batch's other transaction was proven before."""
    aborted = LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5")
    door, out = _first_look({("t", 1, 5): aborted}, prove=frozenset({txn_key(_B)}))
    assert door.asked == 1
    assert isinstance(out, StrandedCommitAborted) and "q-1-0" in str(out)


def test_an_acknowledged_loss_proven_again_is_neither_raised_nor_held() -> None:
    """A repair of a batch whose loss an operator acknowledged proves the batch anew: the loss
    acknowledged is said in the log, not raised (the batch cannot be acknowledged twice), and a
    loss not acknowledged still is."""
    aborted = LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5")
    door, out = _first_look({("t", 1, 5): aborted}, acknowledged=frozenset({txn_key(_B)}))
    assert isinstance(out, StrandedReport) and "q-1-0" not in door.state.stranded
    door, out = _first_look({("t", 0, 5): aborted, ("t", 1, 5): aborted},
                            acknowledged=frozenset({txn_key(_B)}))
    assert isinstance(out, StrandedCommitAborted)
    assert "q-0-0" in str(out) and "q-1-0" not in str(out)


def test_a_first_look_is_not_asked_for_without_prove() -> None:
    """Every other check (the usual one after each commit) asks the log nothing."""
    a = Handle("q-0-0", PID, EPOCH, (PartitionSpan("t", 0, 5, 5, 1),), 1, "c", 0, 60000, 0, 0, 0)
    state = fold([(0, Prepared("1", (a,))), (1, Committed("1", 0, ()))])
    door = _FirstLookDoor(state, {})
    report = release_stranded_commits(cast(Any, door), list(state.batches.values()), wait_ms=1000,
                                      grace_ms=100)
    assert door.asked == 0 and report.looked == () and door.appended == []


_ALL_T = frozenset({("t", p) for p in range(8)})


@pytest.mark.parametrize(("patient", "own", "late", "second"), [
    # A commit's own partitions, not stable at 30 ms: asked again, for longer.
    (("2",), 300, _ALL_T, _ALL_T),
    (("1",), 5, {("old", 0)}, {("old", 0)}),
    # A partition only an older batch has (held there by something else): judged after 30 ms.
    (("2",), 300, {("old", 0)}, None),
    # A partition of the commit's whose leader did not answer (wait_stable retried it): judged.
    (("2",), 300, {("t", 3): None}, None),
    # A check patient for all (recovery's first: the retained batches' markers landed long ago).
    (None, 0, {("old", 0)}, None),
], ids=["own-late", "own-late-small", "older-held", "own-unanswered", "patient-for-all"])
def test_only_a_commits_own_partitions_wait_longer_the_more_transactions_it_ended(
        patient: tuple[str, ...] | None, own: int, late: Any,
        second: frozenset[tuple[str, int]] | None) -> None:
    """The ListOffsets-only wait before judging: 30 ms for every partition checked, then, for the
    partitions of the batches the check is patient for (a commit's own) that answered not stable,
    more, in proportion to their transactions (their markers take the broker longer to write).
    Any other partition still not stable is judged after the 30 ms, as before: one held there by
    something else costs no more than it did. (`late`: the partitions the first wait finds not
    stable, or, mapped to None, without an answer.)"""
    def handle(batch: int, i: int) -> Handle:
        return Handle(f"q-{i}-0", PID + i, EPOCH, (PartitionSpan("t", i % 8, 5 + batch, 5, 1),),
                      1, "c", 0, 60000, i, 0, 0)

    only_in_1 = Handle("q-900-0", PID + 900, EPOCH, (PartitionSpan("old", 0, 5, 5, 1),), 1, "c",
                       0, 60000, 900, 0, 0)
    state = fold([(0, Prepared("1", (*(handle(1, i) for i in range(4)), only_in_1))),
                  (1, Committed("1", 0, ())),
                  (2, Prepared("2", tuple(handle(2, i) for i in range(300)))),
                  (3, Committed("2", 2, ()))])
    door = _FirstLookDoor(state, {})
    door.late_once = set(late)
    door.unanswered_once = {tp for tp in late if isinstance(late, dict)}

    def check() -> None:
        release_stranded_commits(cast(Any, door), list(state.batches.values()), wait_ms=5000,
                                 grace_ms=100, patient=patient)

    base = marker_window_s(0, 5000)
    if second is None:
        with pytest.raises(AttributeError, match="describe_transactions"):
            check()  # straight to the judging (which this door cannot answer)
        assert door.windows == [(base, _ALL_T | {("old", 0)})]
        return
    check()
    assert door.windows[0] == (base, _ALL_T | {("old", 0)})
    [(extra, asked)] = door.windows[1:]
    assert extra == pytest.approx(marker_window_s(own, 5000) - base) and extra > 0
    assert asked == second


@pytest.mark.parametrize(("answer", "raises", "asked"), [
    (LogCheckResult(LogOutcome.COMMITTED), None, 2),
    (LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5"), StrandedCommitAborted, 4),
    (LogCheckResult(LogOutcome.NOT_YET_STABLE), CommitUnverified, 8),
    (LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.BELOW_LOG_START, "retention"), None, 2),
], ids=["committed", "aborted", "not-yet-stable", "records-gone"])
def test_a_rerun_of_a_committed_job_looks_at_its_records_and_records_nothing(
        tmp_path: Path, answer: LogCheckResult, raises: type[Exception] | None,
        asked: int) -> None:
    """A re-run of a committed job writes nothing and takes no lease (another job of the family
    may run), yet says the job is committed: it proves that from the log, reading only. An
    aborted span is a loud loss (at every re-run); records not visible yet, after a moment's
    wait (or a log that cannot answer), are not reported committed (CommitUnverified: recovery
    finishes the check); a proof (or records past proving) is remembered in the process, so the
    second look asks nothing; an acknowledged loss is proven again once, quietly."""
    coord, checks = _committed_job(tmp_path, {("t", 1, 5): answer})
    last = Session(coord.log).state.last_seq
    for _ in range(2):
        if raises is not None:
            with pytest.raises(raises, match="batch job-1"):
                coord.recovery.look_at("job-1")
        else:
            coord.recovery.look_at("job-1")
    # Each span once per look; twice (before and after the wait) while one is not stable.
    assert checks.asked == asked
    assert checks.waited == (2 if answer.outcome is LogOutcome.NOT_YET_STABLE else 0)
    assert Session(coord.log).state.last_seq == last  # reading only
    if raises is StrandedCommitAborted:  # acknowledged (the log proves it): quiet from then on
        assert coord.recovery.acknowledge_loss("job-1", "test: handled") == ("q-1-0",)
        asked = checks.asked
        coord.recovery.look_at("job-1")  # proven again (the loss acknowledged: not raised)
        assert checks.asked == asked + 2
        coord.recovery.look_at("job-1")  # and remembered
        assert checks.asked == asked + 2


def test_a_rerun_right_after_the_commit_waits_a_moment_for_its_markers(tmp_path: Path) -> None:
    """A re-run started as the commit returns: the markers are still on their way (not stable).
    The look waits for stability (the proof's budget) and asks again: proven, not a false
    CommitUnverified (seen on the real broker under load:
    tests/spark/test_lease_ends_before_fences.py)."""
    coord, checks = _committed_job(tmp_path, {("t", 1, 5): LogCheckResult(LogOutcome.NOT_YET_STABLE)})
    checks.after_wait = {("t", 1, 5): LogCheckResult(LogOutcome.COMMITTED)}
    coord.recovery.look_at("job-1")
    assert (checks.waited, checks.asked) == (1, 4)
    coord.recovery.look_at("job-1")  # proven: remembered
    assert checks.asked == 4


def _committed_job(tmp_path: Path, answers: dict[tuple[str, int, int], LogCheckResult],
                   more: Sequence[LogRecord] = ()) -> tuple[DriverUnderTest, _FirstLookDoor]:
    """A job family's log with job-1 committed on q-0-0 (t[0]@5) and q-1-0 (t[1]@5), then
    `more`; log checks answered from `answers` (committed otherwise)."""
    a = Handle("q-0-0", PID, EPOCH, (PartitionSpan("t", 0, 5, 5, 1),), 1, "c", 0, 60000, 0, 0, 0)
    b = Handle("q-1-0", PID + 1, EPOCH, (PartitionSpan("t", 1, 5, 5, 1),), 1, "c", 0, 60000, 1,
               0, 0)
    coord = DriverUnderTest(open_log(str(tmp_path / "log")), cast(Any, None), "job", "q", "q")
    coord.bind()
    session = Session(coord.log)
    session.append(Committed("job-1", session.append(Prepared("job-1", (a, b))), ()))
    for record in more:
        session.append(record)
    checks = _FirstLookDoor(session.state, answers)
    coord.recovery.control = cast(Any, checks)
    return coord, checks


def test_a_loss_is_acknowledged_whole_or_not_at_all(tmp_path: Path) -> None:
    """One span proven aborted, another the log cannot answer for yet (its leader away): the
    acknowledgement is refused, since checks stop looking at an acknowledged batch and the
    second span, proven aborted later, would go unsaid."""
    coord, _ = _committed_job(tmp_path, {
        ("t", 1, 5): LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5"),
        ("t", 0, 5): LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR, "no leader")})
    with pytest.raises(ResolutionRefused, match=r"cannot answer yet.*no leader"):
        coord.recovery.acknowledge_loss("job-1", "test: handled")
    assert coord.log.index.get("loss:job-1") is None


def test_acknowledging_a_loss_keeps_the_hold_of_another_batch_on_the_same_id(
        tmp_path: Path) -> None:
    """job-1's records on q-1-0 are proven aborted; job-2 reused q-1-0, committed, and its
    stranded commit's release was cut short (the id is held for job-2, its partitions named).
    The acknowledgement of job-1 must leave job-2's hold: without it, job-2's half-done release
    would be taken for a live writer, left to its timeout, and its committed records aborted."""
    c = Handle("q-1-0", PID + 1, EPOCH + 2, (PartitionSpan("t", 1, 9, 9, 1),), 1, "c", 0, 60000,
               1, 0, 0)
    coord, _ = _committed_job(tmp_path, {("t", 1, 5): LogCheckResult(
        LogOutcome.ABORTED, detail="aborted from offset 5")}, more=[
        Prepared("job-2", (c,)), Committed("job-2", 2, ()),
        Released(("job-2",), ("q-1-0",), (("q-1-0", "t", 1),))])
    assert coord.recovery.acknowledge_loss("job-1", "test: handled") == ("q-1-0",)
    hold = Session(coord.log).state.stranded["q-1-0"]
    assert hold.batches == ("job-2",) and hold.released


@pytest.mark.parametrize("acknowledged", [True, False], ids=["acknowledged", "not-acknowledged"])
def test_a_held_id_reused_after_an_acknowledged_loss_is_proven_without_it(
        acknowledged: bool) -> None:
    """Batch 1's transaction on q-1-0 was proven aborted and the loss acknowledged; batch 2
    reuses the id and is held for it (a check could not read its partition). The hold's proof
    covers every visible handle of the id, batch 1's among them: the acknowledged loss must
    neither raise again nor keep the hold for good (a review found every later check raising and
    the offsets stalled); a loss nobody acknowledged still raises."""
    later = Handle("q-1-0", PID + 1, EPOCH + 2, (PartitionSpan("t", 1, 9, 9, 1),), 1, "c", 0,
                   60000, 1, 0, 0)
    state = fold([(0, Prepared("1", (_A, _B))), (1, Committed("1", 0, ())),
                  (2, Prepared("2", (later,))), (3, Committed("2", 2, ())),
                  (4, Stranded((("2", "q-1-0", "leader away"),), ()))])
    aborted = LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5")
    door = _FirstLookDoor(state, {("t", 1, 5): aborted})
    if acknowledged:
        door.acknowledged["1"] = frozenset({txn_key(_B)})
        release_stranded_commits(cast(Any, door), list(state.batches.values()), wait_ms=1000,
                                 grace_ms=100)
        assert door.state.stranded == {}
        assert [r for r in door.appended if isinstance(r, Stranded)][-1].cleared == ("q-1-0",)
    else:
        with pytest.raises(StrandedCommitAborted, match="q-1-0"):
            release_stranded_commits(cast(Any, door), list(state.batches.values()),
                                     wait_ms=1000, grace_ms=100)
        assert "q-1-0" in door.state.stranded
