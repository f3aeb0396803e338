"""Copy-forward's pure decisions (issue 31 B): which decided handles the fold calls lost, what the
read-back must show to verify, and what the policy makes of it."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol.strategies import batch_handles, handles
from tests.protocol.test_decisions import KINDS, _record
from twopc.control import Ending, ReadProblem, Record, SpanRecords
from twopc.errors import InconsistentLog
from twopc.protocol.copies import (
    TRANSIENT_PROBLEMS,
    CopyCheck,
    RepairAction,
    RepairPolicy,
    decide_repair,
    parse_policy,
    plan_copy,
    rerun_replaces_lost,
    verify_copy,
)
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Aborted, Committed, LogRecord, Partial, Prepared, Resolved
from twopc.protocol.state import BatchStatus, fold


def h(p: int, slot: int = 0) -> Handle:
    return Handle(f"q-{p}-{slot}", 10 + p, slot, (PartitionSpan("t", p, 100 * p, None, 2, None),),
                  2, f"s{p}", 0, 1000, p, 0, 0)


def test_lost_follows_partial_aborted_and_the_repairs() -> None:
    a, b, c = h(0), h(1), h(2)
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0")))])
    assert state.batch("5").lost == {1: b, 2: c}
    # A repair intent that aborts: its handles are lost too (decided, then aborted); it keeps the
    # visible part's partitioning, so it replaces the earlier ones partition by partition.
    b2 = h(1, 1)
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0"))),
                  (2, Prepared("5", (b2,))), (3, Aborted("5", (b2,), "timeout", 2))])
    assert state.batch("5").lost == {1: b2, 2: c}
    # ...and one that commits part of it leaves the rest lost; one that commits ends it.
    c2 = h(2, 1)
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0"))),
                  (2, Prepared("5", (b2, c2))), (3, Partial("5", 2, ("q-1-1",), ("q-2-1",)))])
    assert state.batch("5").lost == {2: c2} and state.batch("5").status is BatchStatus.PARTIAL
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0"))),
                  (2, Prepared("5", (b2, c2))), (3, Committed("5", 2, ()))])
    assert state.batch("5").lost == {} and state.batch("5").status is BatchStatus.COMMITTED
    aborted = fold([(0, Prepared("6", (a, b))), (1, Aborted("6", (a, b), "timeout", 0))])
    assert aborted.batch("6").lost == {0: a, 1: b}
    # A fence without intent (a failed guard) decided nothing: not lost.
    assert fold([(0, Aborted("7", (a,), "guard", None))]).batch("7").lost == {}
    # An operator's resolution ends it.
    resolved = fold([(0, Prepared("5", (a, b))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0",))),
                     (2, Resolved("5", "aborted", "n"))])
    assert resolved.batch("5").lost == {}


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["1", "2"]), st.booleans()),
                max_size=12), batch_handles())
def test_lost_is_never_visible_and_always_decided(steps: list[tuple[str, str, bool]],
                                                 hs: tuple[Handle, ...]) -> None:
    records: list[tuple[int, LogRecord]] = []
    intents: dict[str, int] = {}
    for seq, (kind, batch, right) in enumerate(steps):
        open_intent = intents.get(batch, -5)
        rec = _record(kind, batch, open_intent if right else open_intent + 1, hs)
        try:
            state = fold([*records, (seq, rec)])
        except InconsistentLog:
            continue
        records.append((seq, rec))
        if kind == "prepared":
            intents[batch] = seq
        decided = {x for _, r in records if isinstance(r, Prepared) for x in r.handles}
        for b in state.batches.values():
            assert not set(b.lost) & set(b.committed)
            assert set(b.lost.values()) <= decided
            if b.status in (BatchStatus.COMMITTED, BatchStatus.NONE):
                assert not b.lost
            if b.lost:
                assert b.status in (BatchStatus.PARTIAL, BatchStatus.ABORTED, BatchStatus.PREPARED)


def test_plan_copy() -> None:
    a, b = h(0), h(1)
    rerun = (h(0, 1), h(1, 1), h(2, 1))
    partial = fold([(0, Prepared("5", (a, b))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0",)))])
    plan = plan_copy(partial.batch("5"), rerun, RepairPolicy.AUTO)
    assert plan is not None and plan.sources == (b,) and plan.duplicates == rerun
    assert plan_copy(partial.batch("5"), rerun, RepairPolicy.RERUN) is None
    aborted = fold([(0, Prepared("6", (a, b))), (1, Aborted("6", (a, b), "timeout", 0))])
    plan = plan_copy(aborted.batch("6"), (), RepairPolicy.COPY)
    assert plan is not None and plan.sources == (a, b) and plan.duplicates == ()
    guard = fold([(0, Aborted("7", (a,), "guard", None))])
    assert plan_copy(guard.batch("7"), rerun, RepairPolicy.COPY) is None
    assert plan_copy(fold([]).batch("8"), rerun, RepairPolicy.COPY) is None


def reads(handle: Handle, ending: Ending = Ending.ABORTED, extra: int = 0,
          problem: ReadProblem | None = None) -> list[SpanRecords]:
    out = []
    for s in handle.spans:
        recs = tuple(Record(s.first_offset + i, 0, None, b"v", ())
                     for i in range(s.record_count + extra))
        out.append(SpanRecords(s.topic, s.partition, s.first_offset,
                               () if problem else recs, None if problem else ending, problem,
                               "detail" if problem else ""))
    return out


def test_verify_copy_table() -> None:
    a = h(3)
    assert verify_copy(a, reads(a), "s3").verified
    cases = [
        (reads(a), "other", "checksum"),
        (reads(a, extra=1), "s3", "the handle counts 2"),
        (reads(a, Ending.COMMITTED), "s3", "ended committed"),
        (reads(a, problem=ReadProblem.BELOW_LOG_START), None, "log start"),
        ([], None, "not read"),
    ]
    for got, checksum, why in cases:
        check = verify_copy(a, got, checksum)
        assert not check.verified and why in "; ".join(check.problems), (why, check)
    # A handle whose total disagrees with its spans (a corrupt handle) never verifies.
    odd = replace(a, record_count=3)
    assert not verify_copy(odd, reads(odd), "s3").verified


@given(handles(), st.sampled_from(list(Ending)), st.integers(-1, 1),
       st.sampled_from([None, *ReadProblem]), st.booleans())
def test_verified_only_when_everything_matches(handle: Handle, ending: Ending, extra: int,
                                               problem: ReadProblem | None, same: bool) -> None:
    got = verify_copy(handle, reads(handle, ending, extra, problem),
                      handle.checksum if same else "x")
    assert got.verified == (ending is Ending.ABORTED and extra == 0 and problem is None and same)


def test_decide_repair_is_exhaustive() -> None:
    good, bad = CopyCheck(h(0)), CopyCheck(h(1), ("gone",))
    later = CopyCheck(h(1), ("the fetch failed",), transient=True)
    for policy, checks in itertools.product(RepairPolicy, itertools.chain.from_iterable(
            itertools.combinations_with_replacement([good, bad, later], n) for n in range(3))):
        d = decide_repair(policy, checks)
        all_good = bool(checks) and all(c.verified for c in checks)
        if policy is RepairPolicy.RERUN:
            assert d.action is RepairAction.RERUN
        elif all_good:
            assert d.action is RepairAction.COPY and not d.reasons
        else:
            # auto falls back to the re-run only when nothing may verify on a later try.
            expect = (RepairAction.FAIL if policy is RepairPolicy.COPY or later in checks
                      else RepairAction.RERUN)
            assert d.action is expect and d.reasons
            if bad in checks:
                assert any("q-1-0" in r and "gone" in r for r in d.reasons)


def test_parse_policy() -> None:
    assert parse_policy(" Copy ") is RepairPolicy.COPY
    with pytest.raises(ValueError, match="auto, copy, rerun"):
        parse_policy("always")


def test_transient_read_problems_are_marked() -> None:
    a = h(3)
    for problem in ReadProblem:
        check = verify_copy(a, reads(a, problem=problem), None)
        assert not check.verified and check.transient == (problem in TRANSIENT_PROBLEMS)


def test_a_superseded_intents_lost_handles_are_not_copied() -> None:
    """Intent 1 (Spark partitions 0-2) aborted by the timeout; the re-run, committed afresh (policy
    rerun, or a copy that could not verify), holds the same rows in partitions 0 and 1 and is
    aborted too: only intent 2's handles may be copied (found by review: intent 1's partition 2
    copied beside them showed its rows twice)."""
    a, b, c = h(0), h(1), h(2)
    a2, b2 = h(0, 1), h(1, 1)
    state = fold([(0, Prepared("5", (a, b, c))), (1, Aborted("5", (a, b, c), "timeout", 0)),
                  (2, Prepared("5", (a2, b2))), (3, Aborted("5", (a2, b2), "timeout", 2))]
                 ).batch("5")
    plan = plan_copy(state, (), RepairPolicy.COPY)
    assert plan is not None and plan.sources == (a2, b2)


def test_a_rerun_that_differs_on_a_lost_partition_wants_the_copy() -> None:
    """A partly visible batch whose re-run reproduces the visible part but not a lost partition
    (other rows, or none): the re-run repair would replace decided records (found by review)."""
    a, b = h(0), h(1)
    state = fold([(0, Prepared("5", (a, b))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0",)))]
                 ).batch("5")
    same = (h(0, 1), replace(h(1, 1), checksum=b.checksum))
    assert not rerun_replaces_lost(state, same, RepairPolicy.AUTO)
    assert rerun_replaces_lost(state, same, RepairPolicy.COPY)
    assert not rerun_replaces_lost(state, same, RepairPolicy.RERUN)
    other = (h(0, 1), replace(h(1, 1), checksum="other"))
    assert rerun_replaces_lost(state, other, RepairPolicy.AUTO)
    assert rerun_replaces_lost(state, (h(0, 1),), RepairPolicy.AUTO)  # no transaction for it

