"""The log check's decision table (docs/design.md section 4)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from twopc.control.logcheck import FetchProbe, LogOutcome, UnknownReason, decide
from twopc.control.record_batches import BatchHeader

PID, EPOCH, OFF = 7, 2, 100


def batch(pid: int = PID, epoch: int = EPOCH, base: int = OFF, attrs: int = 0x10) -> BatchHeader:
    return BatchHeader(base, 100, 0, 2, 0, attrs, 9, 0, 0, pid, epoch, 0, 10)


def probe(**kw: object) -> FetchProbe:
    base = FetchProbe("t", 0, OFF, None, 200, 200, 0, (), batch())
    return replace(base, **kw)  # type: ignore[arg-type]


def test_table() -> None:
    rows = [
        (probe(), LogOutcome.COMMITTED, None),
        (probe(aborted_transactions=((PID, OFF),)), LogOutcome.ABORTED, None),
        (probe(aborted_transactions=((PID, 50),)), LogOutcome.ABORTED, None),
        (probe(aborted_transactions=((PID + 1, OFF),)), LogOutcome.COMMITTED, None),
        (probe(aborted_transactions=((PID, OFF + 1),)), LogOutcome.COMMITTED, None),
        (probe(last_stable_offset=OFF), LogOutcome.NOT_YET_STABLE, None),
        (probe(log_start_offset=OFF + 1), LogOutcome.UNKNOWN, UnknownReason.BELOW_LOG_START),
        (probe(error="OFFSET_OUT_OF_RANGE", log_start_offset=OFF + 5, first_batch=None),
         LogOutcome.UNKNOWN, UnknownReason.BELOW_LOG_START),
        (probe(first_batch=batch(pid=PID + 1)), LogOutcome.UNKNOWN, UnknownReason.OTHER_PRODUCER),
        (probe(first_batch=batch(epoch=EPOCH + 1)), LogOutcome.UNKNOWN, UnknownReason.OTHER_EPOCH),
        (probe(first_batch=batch(attrs=0)), LogOutcome.UNKNOWN, UnknownReason.NOT_TRANSACTIONAL),
        (probe(first_batch=batch(attrs=0x30)), LogOutcome.UNKNOWN,
         UnknownReason.NOT_TRANSACTIONAL),
        (probe(first_batch=batch(base=OFF + 20)), LogOutcome.UNKNOWN, UnknownReason.NO_BATCH),
        (probe(first_batch=None), LogOutcome.UNKNOWN, UnknownReason.NO_BATCH),
        (probe(error="UNKNOWN_TOPIC_ID"), LogOutcome.UNKNOWN, UnknownReason.TOPIC_CHANGED),
        (probe(error="NOT_LEADER_OR_FOLLOWER"), LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR),
    ]
    for p, outcome, reason in rows:
        got = decide(p, PID, EPOCH)
        assert (got.outcome, got.reason) == (outcome, reason), (p, got)


@given(st.integers(0, 10), st.integers(0, 3), st.integers(0, 400), st.integers(0, 400),
       st.lists(st.tuples(st.integers(0, 10), st.integers(0, 300)), max_size=4))
def test_a_verdict_needs_our_batch_below_the_stable_offset(
        pid: int, epoch: int, lso: int, log_start: int, aborted: list[tuple[int, int]]) -> None:
    p = probe(last_stable_offset=lso, log_start_offset=log_start,
              aborted_transactions=tuple(aborted))
    got = decide(p, pid, epoch)
    if got.outcome in (LogOutcome.COMMITTED, LogOutcome.ABORTED):
        assert (pid, epoch) == (PID, EPOCH) and lso > OFF and log_start <= OFF
        assert (got.outcome is LogOutcome.ABORTED) == any(
            a_pid == pid and first <= OFF for a_pid, first in aborted)
    if got.outcome is LogOutcome.UNKNOWN:
        assert got.reason is not None


def test_out_of_range_above_the_log_end_is_unknown() -> None:
    got = decide(probe(error="OFFSET_OUT_OF_RANGE", log_start_offset=0, high_watermark=50,
                       first_batch=None), PID, EPOCH)
    assert got.reason is UnknownReason.NO_BATCH and "high watermark 50" in got.detail
