"""Rescaling's pure decisions (issue 31 A.2): what the fold leaves to copy after runs with other
partition counts, what a DataLossError says of the partitioning, when a binding is the same owner
under another prefix. The real broker's side: tests/driver/test_rescaling.py."""

from __future__ import annotations

from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Aborted, Partial, Prepared
from twopc.protocol.owner import Owner
from twopc.protocol.plans import partitioning_note
from twopc.protocol.state import BatchStatus, fold


def h(p: int, slot: int = 0) -> Handle:
    return Handle(f"q-{p}-{slot}", 10 + p, slot, (PartitionSpan("t", p % 2, 100 * p, None, 2, None),),
                  2, f"s{p}.{slot}", 0, 1000, p, slot, 0)


def test_a_fresh_intent_forgets_what_an_earlier_attempt_left_lost() -> None:
    """Run 1 (4 partitions) decided and aborted whole; run 2 (2 partitions) decided, partition 0
    visible: only run 2's partition 1 is left to copy, not run 1's partitions 2 and 3, which hold
    rows of the visible partition under the old partitioning."""
    run1 = tuple(h(p) for p in range(4))
    r0, r1 = h(0, 1), h(1, 1)
    state = fold([(0, Prepared("0", run1)), (1, Aborted("0", run1, "timeout", 0)),
                  (2, Prepared("0", (r0, r1))), (3, Partial("0", 2, ("q-0-1",), ("q-1-1",)))])
    b = state.batch("0")
    assert b.status is BatchStatus.PARTIAL and b.lost == {1: r1}
    # Wholly aborted again: the later attempt is the batch now.
    state = fold([(0, Prepared("0", run1)), (1, Aborted("0", run1, "timeout", 0)),
                  (2, Prepared("0", (r0, r1))), (3, Aborted("0", (r0, r1), "timeout", 2))])
    assert state.batch("0").lost == {0: r0, 1: r1}


def test_a_repair_intent_keeps_the_partitioning_of_the_visible_part() -> None:
    a, b, c = h(0), h(1), h(2)
    b2 = h(1, 1)
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0"))),
                  (2, Prepared("5", (b2,))), (3, Aborted("5", (b2,), "timeout", 2))])
    assert state.batch("5").lost == {1: b2, 2: c}


def test_partitioning_note() -> None:
    run = (h(0), h(1), h(2), h(3))
    state = fold([(0, Prepared("0", run)), (1, Partial("0", 0, ("q-0-0", "q-1-0"),
                                                         ("q-2-0", "q-3-0")))]).batch("0")
    assert "partition count changed (it was at least 4)" in partitioning_note(state, 2)
    assert "[0, 1, 2, 3]" in partitioning_note(state, 3)
    assert "may have changed" in partitioning_note(state, 6)
    assert partitioning_note(state, 4) == ""  # the same count: nothing to say of it
    assert partitioning_note(fold([]).batch("0"), 2) == ""


def test_an_owner_under_another_prefix() -> None:
    q = Owner.query("qid", "orders")
    assert q.renamed_to(Owner.query("qid", "orders-v2"))
    assert not q.renamed_to(Owner.query("other", "orders-v2"))  # another query: QueryMismatch
    assert not q.renamed_to(q)
    assert Owner.jobs("orders").renamed_to(Owner.jobs("orders-v2"))
    assert not Owner.jobs("orders").renamed_to(Owner.query("qid", "orders-v2"))
