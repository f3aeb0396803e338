"""The log check's decision table (docs/design.md section 4)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.control.logcheck import (
    FetchProbe,
    LogOutcome,
    RangeAnswer,
    UnknownReason,
    decide,
    decide_spans,
    probe_at,
)
from twopc.control.record_batches import BatchHeader

PID, EPOCH, OFF = 7, 2, 100


def batch(pid: int = PID, epoch: int = EPOCH, base: int = OFF, attrs: int = 0x10) -> BatchHeader:
    return BatchHeader(base, 100, 0, 2, 0, attrs, 9, 0, 0, pid, epoch, 0, 10)


def probe(**kw: object) -> FetchProbe:
    base = FetchProbe("t", 0, OFF, None, 200, 200, 0, (), batch())
    return base._replace(**kw)  # type: ignore[arg-type]


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


# --- one fetch for many spans: the aborted list names earlier transactions too ----------------------

@dataclass(frozen=True)
class Txn:
    pid: int
    epoch: int
    first: int
    batches: tuple[int, ...]  # base offsets of its data batches
    fate: str  # "commit", "abort" or "open"
    marker: int | None  # offset of its control batch


@dataclass(frozen=True)
class Log:
    batches: tuple[BatchHeader, ...]
    txns: tuple[Txn, ...]
    end: int  # log end offset

    @property
    def last_stable(self) -> int:
        return min([t.first for t in self.txns if t.fate == "open"], default=self.end)

    def aborted_index(self) -> list[tuple[int, int, int]]:
        """(producer id, first offset, marker offset) of each aborted transaction: Kafka's
        transaction index."""
        return [(t.pid, t.first, t.marker) for t in self.txns
                if t.fate == "abort" and t.marker is not None]


def header(base: int, count: int, pid: int, epoch: int, attrs: int) -> BatchHeader:
    return BatchHeader(base, 100, 0, 2, 0, attrs, count - 1, 0, 0, pid, epoch, 0, count)


@st.composite
def logs(draw: st.DrawFn) -> Log:
    """A partition's log written by a few producer ids, each one transaction at a time: epochs
    that stay (transaction version 1) or bump per transaction (version 2, or a fenced attempt),
    commits and aborts (an abort may land while the producer believes it is still open, as an
    outside abort does), markers that end nothing, plain idempotent batches between, and
    transactions left open."""
    pids = [11, 12, 13]
    epoch = dict.fromkeys(pids, 0)
    open_: dict[int, list[int]] = {}  # pid -> data batch bases
    first: dict[int, int] = {}
    batches: list[BatchHeader] = []
    txns: list[Txn] = []
    offset = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["data", "data", "end", "plain"]))
        pid = draw(st.sampled_from(pids))
        if kind == "plain":
            count = draw(st.integers(1, 3))
            batches.append(header(offset, count, 99, 0, 0))
            offset += count
        elif kind == "data":
            if pid not in open_:
                if draw(st.booleans()):
                    epoch[pid] += 1
                open_[pid], first[pid] = [], offset
            count = draw(st.integers(1, 3))
            batches.append(header(offset, count, pid, epoch[pid], 0x10))
            open_[pid].append(offset)
            offset += count
        elif pid in open_:
            fate = draw(st.sampled_from(["commit", "abort"]))
            batches.append(header(offset, 1, pid, epoch[pid], 0x30))
            txns.append(Txn(pid, epoch[pid], first[pid], tuple(open_.pop(pid)), fate, offset))
            offset += 1
        elif draw(st.booleans()):
            # A marker that ends nothing (a release's commit, an outside abort's, arriving where
            # the producer id has no open transaction): Kafka indexes no aborted entry for it.
            batches.append(header(offset, 1, pid, epoch[pid], 0x30))
            offset += 1
    for pid, bases in open_.items():
        txns.append(Txn(pid, epoch[pid], first[pid], tuple(bases), "open", None))
    return Log(tuple(batches), tuple(txns), offset)


def fetch(log: Log, at: int, most: int, upper_slack: int) -> RangeAnswer:
    """What the broker returns for a read_committed fetch at `at`: the batches from the one
    holding `at` up to the last stable offset, at most `most` of them (max bytes; the first one
    always), and the aborted transactions whose marker is at or after `at` and whose first offset
    is below an upper bound at or past the returned data (the offset index's next entry:
    LocalLog.addAbortedTransactions, TransactionIndex.collectAbortedTxns)."""
    lso = log.last_stable
    got = [b for b in log.batches if b.last_offset >= at and b.base_offset < lso][:max(most, 1)]
    end = got[-1].last_offset + 1 if got else at
    upper = min(end + upper_slack, log.end)
    aborted = tuple((pid, first) for pid, first, last in log.aborted_index()
                    if last >= at and first < max(upper, end))
    return RangeAnswer("t", 0, at, None, lso, log.end, 0, aborted, tuple(got))


def truth(log: Log, txn: Txn, offset: int) -> LogOutcome:
    if offset >= log.last_stable:
        return LogOutcome.NOT_YET_STABLE
    return {"commit": LogOutcome.COMMITTED, "abort": LogOutcome.ABORTED}[txn.fate]


@settings(max_examples=400, deadline=None)
@given(logs(), st.data())
def test_one_fetch_from_below_decides_every_span_it_reaches_as_a_fetch_at_the_span(
        log: Log, data: st.DataObject) -> None:
    """For every span of every transaction (its first batch, and its later batches) and every
    fetch start at or below it: the verdict from the ranged answer equals the truth and the
    verdict of today's fetch at the span itself."""
    spans = [(base, t.pid, t.epoch, t) for t in log.txns for base in t.batches]
    most = data.draw(st.integers(1, 40), label="batches per answer")
    slack = data.draw(st.integers(0, 10), label="upper bound slack")
    for at in range(0, log.end + 1):
        answer = fetch(log, at, most, slack)
        here = [s for s in spans if s[0] >= at]
        got = decide_spans(answer, [(o, pid, epoch) for o, pid, epoch, _ in here])
        for (offset, pid, epoch, txn), result in zip(here, got, strict=True):
            alone = decide(probe_at(fetch(log, offset, 1, slack), offset)  # type: ignore[arg-type]
                           , pid, epoch)
            assert alone.outcome is truth(log, txn, offset), (offset, txn, alone)
            if result is None:  # not reached: fetched again from there
                reached = [b for b in answer.batches if b.last_offset >= offset]
                assert not reached and offset < log.last_stable and offset != at
                continue
            assert result.outcome is truth(log, txn, offset), (at, offset, txn, answer, result)
            # Another epoch of the same producer id at that offset is no verdict either way.
            other = decide_spans(answer, [(offset, pid, epoch + 1)])[0]
            assert other is not None and other.outcome in (
                LogOutcome.UNKNOWN, LogOutcome.NOT_YET_STABLE)


@given(logs())
def test_a_fetch_at_the_span_is_the_rule_before_ranged_fetches(log: Log) -> None:
    """F == O: no marker can lie between the entry and the batch, so the verdict is exactly the
    earlier rule (an entry of our producer id at or before our batch)."""
    for t in log.txns:
        for base in t.batches:
            answer = fetch(log, base, 1, 0)
            p = probe_at(answer, base)
            assert p is not None
            if p.first_batch is None:  # read_committed returns nothing from the stable offset
                assert base >= log.last_stable
                continue
            got = decide(p, t.pid, t.epoch)
            if got.outcome in (LogOutcome.COMMITTED, LogOutcome.ABORTED):
                before = any(pid == t.pid and first <= p.first_batch.base_offset
                             for pid, first in p.aborted_transactions)
                assert (got.outcome is LogOutcome.ABORTED) == before


def test_an_earlier_aborted_transaction_of_the_same_producer_id_is_not_ours() -> None:
    """The false loss a ranged fetch invites: producer 11 aborted at epoch 1 (offsets 0-1,
    marker 2), then committed at epoch 2 (3, marker 4). A fetch from 0 lists (11, 0); only the
    marker at 2 says it is not the transaction at 3."""
    batches = (header(0, 2, 11, 1, 0x10), header(2, 1, 11, 1, 0x30),
               header(3, 1, 11, 2, 0x10), header(4, 1, 11, 2, 0x30))
    answer = RangeAnswer("t", 0, 0, None, 5, 5, 0, ((11, 0),), batches)
    first, second = decide_spans(answer, [(0, 11, 1), (3, 11, 2)])
    assert first is not None and first.outcome is LogOutcome.ABORTED
    assert second is not None and second.outcome is LogOutcome.COMMITTED
    # Without its marker in the data (a fetch that skipped it) the entry would be taken for ours:
    # why the rule needs the data contiguous from the fetch offset.
    cut = replace(answer, batches=batches[:1] + batches[2:])
    assert decide_spans(cut, [(3, 11, 2)])[0].outcome is LogOutcome.ABORTED  # type: ignore[union-attr]
