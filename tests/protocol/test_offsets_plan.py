"""When the consumer group may take a batch's source offsets (protocol/plans.py `plan_offsets`,
issue 30 item 2): folded from real records, against a reference written from the rule's text.
Pure: no broker."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from twopc.protocol.handle import Handle
from twopc.protocol.log_records import (
    Aborted,
    Committed,
    LogRecord,
    OffsetsCommitted,
    Partial,
    Prepared,
    RecordFormatError,
    Released,
    Stranded,
    from_body,
    to_body,
)
from twopc.protocol.offsets import SourceOffsets, alone_id
from twopc.protocol.plans import plan_offsets, purge_below
from twopc.protocol.state import BatchStatus, fold

PREFIX = "q"
# What happened to one batch, in log order: its outcome, and what came after.
KINDS = ("committed", "committed_no_offsets", "committed_old_carrier", "partial", "open",
         "aborted_after_intent", "held", "released_unconfirmed", "moved", "empty_committed")
UNPROVEN = {"partial", "open", "aborted_after_intent", "held", "released_unconfirmed"}
PENDING = {"committed", "held", "released_unconfirmed", "empty_committed"}


def handle(batch: int, p: int) -> Handle:
    return Handle(f"{PREFIX}-{p}-{batch % 3}", 1000 + batch, batch, (), 0, "", 0, 60000, p, 0, 0)


def ends(batch: int, deferred: bool = True) -> SourceOffsets:
    offsets = SourceOffsets("g", (("src", 0, 10 * (batch + 1)),))
    return offsets.deferred_on(PREFIX) if deferred else offsets.with_carrier(f"{PREFIX}-1-0")


def records_of(kinds: list[str]) -> list[LogRecord]:
    out: list[LogRecord] = []

    def seq() -> int:
        return len(out) - 1

    for b, kind in enumerate(kinds):
        name = str(b)
        hs = (handle(b, 0), handle(b, 1))
        if kind == "empty_committed":
            out.append(Prepared(name, (), ends(b)))
            out.append(Committed(name, seq(), ()))
            continue
        offsets = None if kind == "committed_no_offsets" else ends(b, kind != "committed_old_carrier")
        out.append(Prepared(name, hs, offsets))
        intent = seq()
        if kind == "open":
            continue
        if kind == "partial":
            out.append(Partial(name, intent, (hs[0].transactional_id,), (hs[1].transactional_id,)))
        elif kind == "aborted_after_intent":
            out.append(Aborted(name, hs, "timed out", intent))
        else:
            out.append(Committed(name, intent, ()))
        if kind == "held":
            out.append(Stranded(((name, hs[0].transactional_id, "markers dropped"),), ()))
        elif kind == "released_unconfirmed":
            out.append(Released((name,), (hs[1].transactional_id,),
                                ((hs[1].transactional_id, "t", 0),)))
        elif kind == "moved":
            out.append(OffsetsCommitted(name, intent))
    return out


def reference(kinds: list[str]) -> tuple[str | None, tuple[str, ...], str | None]:
    """The rule as the docs state it: the newest batch whose offsets wait, with nothing unproven
    intended at or before it; what waits behind the first unproven batch."""
    def pending(i: int) -> bool:  # a later move covers it
        return kinds[i] in PENDING and "moved" not in kinds[i + 1:]

    newest: str | None = None
    for b, kind in enumerate(kinds):
        if kind in UNPROVEN:
            waiting = tuple(str(i) for i in range(b, len(kinds)) if pending(i))
            return (newest, waiting, str(b)) if waiting else (newest, (), None)
        if kind == "moved":
            newest = None  # moved up to here: earlier ones are covered
        elif pending(b):
            newest = str(b)
    return newest, (), None


@given(st.lists(st.sampled_from(KINDS), max_size=8))
def test_the_group_moves_only_past_proven_batches(kinds: list[str]) -> None:
    records = records_of(kinds)
    # Through the stored form, as a driver reads them.
    stored = [from_body(msgpack.unpackb(msgpack.packb(to_body(r)))) for r in records]
    assert stored == records
    state = fold(enumerate(stored))
    plan = plan_offsets(state)
    assert (plan.batch, plan.waiting, plan.blocked_by) == reference(kinds), kinds
    if plan.batch is not None:
        assert plan.offsets == ends(int(plan.batch))
        assert state.batches[plan.batch].offsets_pending
        assert plan.offsets is not None and plan.offsets.carrier == alone_id(PREFIX)
    if plan.waiting:
        assert plan.why


def test_a_move_covers_every_batch_intended_before_it() -> None:
    kinds = ["committed", "committed", "committed"]
    records = records_of(kinds)
    state = fold(enumerate([*records, OffsetsCommitted("1", records.index(
        next(r for r in records if isinstance(r, Prepared) and r.batch == "1")))]))
    assert [state.batches[b].offsets_pending for b in "012"] == [False, False, True]
    assert plan_offsets(state).batch == "2"


def test_a_batch_whose_offsets_wait_is_never_purged() -> None:
    kinds = ["held", "committed", "committed", "moved", "committed"]
    state = fold(enumerate(records_of(kinds)))
    below = purge_below(state, retain_batches=0)
    assert below is None or below <= state.batches["0"].first_seq
    records = records_of(["committed"] * 4)
    moved = fold(enumerate([*records, OffsetsCommitted("3", 6)]))
    cut = purge_below(moved, retain_batches=1)
    assert cut is not None and cut > moved.batches["2"].first_seq
    # Without any hold: only the batches whose offsets have not moved are kept whole.
    waiting = fold(enumerate([*records, OffsetsCommitted("1", 2)]))
    cut = purge_below(waiting, retain_batches=0)
    assert cut is not None and cut == waiting.batches["2"].first_seq


def test_a_move_recorded_after_its_batch_was_purged_marks_only_batches_up_to_it() -> None:
    """The record names its batch's intent: a purge that took the batch's records (a log read
    from the low-water mark) must not let it mark later batches moved."""
    records = [*records_of(["committed", "held", "committed"]), OffsetsCommitted("0", 0)]
    # Read from seq 2 on: batch 0's records are gone.
    state = fold(((i, r) for i, r in enumerate(records) if i >= 2), start_seq=2)
    assert "0" not in state.batches
    assert state.batches["1"].offsets_pending and state.batches["2"].offsets_pending
    assert plan_offsets(state).blocked_by == "1"


def test_a_new_intent_with_offsets_makes_them_pending_again() -> None:
    records: list[LogRecord] = [*records_of(["aborted_after_intent"]), OffsetsCommitted("0", 0)]
    assert fold(enumerate(records)).batches["0"].offsets_moved
    hs = (handle(0, 0), handle(0, 1))
    records += [Prepared("0", hs, ends(0)), Committed("0", len(records), ())]
    assert fold(enumerate(records)).batches["0"].offsets_pending


def test_deferred_offsets_are_a_format_of_their_own() -> None:
    """Code that commits offsets with the batch's own transactions must refuse an intent whose
    offsets move later (it would roll the intent forward and never move them)."""
    body = to_body(Prepared("0", (handle(0, 0),), ends(0)))
    assert body["v"] == 3 and body["offsets"]["deferred"] is True
    assert to_body(Prepared("0", (handle(0, 0),), ends(0, deferred=False)))["v"] == 2
    forged = dict(body, v=2)
    try:
        from_body(forged)
    except RecordFormatError as exc:
        assert "deferred" in str(exc)
    else:
        raise AssertionError("a format-2 intent with deferred offsets was read")
    assert to_body(OffsetsCommitted("7", 12)) == {"kind": "offsets_committed", "batch": "7",
                                                  "intent": 12, "v": 1}
    assert BatchStatus.COMMITTED.value == "committed"
