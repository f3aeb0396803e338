"""The exact log check (docs/design.md section 4): what the log itself says became of a transaction.

Given what one read_committed Fetch at or below the transaction's first offset returned, decide:
committed, aborted, not yet stable, or unknown with a reason. Pure: the fetch is done by the
client. One fetch answers for every span of a partition that its returned batches reach
(`decide_spans`); the rule that keeps that sound is at `decide`.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from twopc.control.record_batches import BatchHeader


class FetchProbe(NamedTuple):
    """What a read_committed Fetch of one partition at one offset returned. A tuple for its
    cost: a log check builds one per span (`decide_spans`), on the control client's thread."""

    topic: str
    partition: int
    offset: int
    error: str | None  # Kafka error name, None when the fetch succeeded
    last_stable_offset: int
    high_watermark: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...]  # (producer id, first offset)
    first_batch: BatchHeader | None
    # Where the fetch started, when below `offset` (None: at `offset`), and the control batches
    # (producer id, base offset) it returned below `first_batch`: the aborted list then also
    # names earlier transactions, and only their markers tell them from ours.
    fetch_offset: int | None = None
    markers: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class LogCheckRequest:
    """One `log_check`: the transaction of (`producer_id`, `epoch`) whose first record in
    `topic`[`partition`] is at `offset`."""

    topic: str
    partition: int
    offset: int
    producer_id: int
    epoch: int
    topic_id: str | None = None


class LogOutcome(enum.Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"
    NOT_YET_STABLE = "not_yet_stable"


class UnknownReason(enum.Enum):
    BELOW_LOG_START = "offset below the log start (retention or deleted records)"
    OTHER_PRODUCER = "another producer's batch is at that offset"
    OTHER_EPOCH = "a batch of the same producer id with another epoch is at that offset"
    NO_BATCH = "no batch holds that offset (compacted topic, or beyond the log end)"
    NOT_TRANSACTIONAL = "the batch at that offset is not transactional"
    TOPIC_CHANGED = "the topic was deleted or recreated (its topic id changed)"
    FETCH_ERROR = "the fetch failed"


@dataclass(frozen=True)
class LogCheckResult:
    outcome: LogOutcome
    reason: UnknownReason | None = None
    detail: str = ""
    probe: FetchProbe | None = None

    @property
    def committed(self) -> bool:
        return self.outcome is LogOutcome.COMMITTED

    def describe(self) -> str:
        text = self.outcome.value
        if self.reason is not None:
            text += f": {self.reason.value}"
        return f"{text} ({self.detail})" if self.detail else text


def _unknown(reason: UnknownReason, detail: str, probe: FetchProbe) -> LogCheckResult:
    return LogCheckResult(LogOutcome.UNKNOWN, reason, detail, probe)


def decide(probe: FetchProbe, producer_id: int, epoch: int) -> LogCheckResult:
    """The fate of producer (`producer_id`, `epoch`)'s transaction whose first record in this
    partition is at `probe.offset`."""
    offset = probe.offset
    if probe.error in ("UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID"):
        return _unknown(UnknownReason.TOPIC_CHANGED, probe.error, probe)
    if probe.log_start_offset > offset >= 0 or (
            probe.error == "OFFSET_OUT_OF_RANGE" and probe.log_start_offset >= 0
            and offset < probe.log_start_offset):
        return _unknown(UnknownReason.BELOW_LOG_START,
                        f"offset {offset} < log start {probe.log_start_offset}", probe)
    if probe.error == "OFFSET_OUT_OF_RANGE":
        return _unknown(UnknownReason.NO_BATCH, f"offset {offset} is out of range (log start "
                        f"{probe.log_start_offset}, high watermark {probe.high_watermark})", probe)
    if probe.error is not None:
        return _unknown(UnknownReason.FETCH_ERROR, probe.error, probe)
    # Below the last stable offset every transaction is decided and its marker written: before
    # that point the answer is not in the log yet.
    if probe.last_stable_offset <= offset:
        return LogCheckResult(LogOutcome.NOT_YET_STABLE, None,
                              f"last stable offset {probe.last_stable_offset} <= {offset}", probe)
    batch = probe.first_batch
    if batch is None or not batch.base_offset <= offset <= batch.last_offset:
        where = "none" if batch is None else f"{batch.base_offset}..{batch.last_offset}"
        return _unknown(UnknownReason.NO_BATCH, f"first batch returned: {where}", probe)
    if batch.producer_id != producer_id:
        return _unknown(UnknownReason.OTHER_PRODUCER,
                        f"producer id {batch.producer_id} epoch {batch.producer_epoch}", probe)
    if batch.producer_epoch != epoch:
        return _unknown(UnknownReason.OTHER_EPOCH, f"epoch {batch.producer_epoch}", probe)
    if not batch.transactional or batch.control:
        return _unknown(UnknownReason.NOT_TRANSACTIONAL, f"attributes {batch.attributes:#x}",
                        probe)
    # The broker lists every aborted transaction whose marker is at or after the fetch offset F
    # (TransactionIndex.collectAbortedTxns: lastOffset >= fetchOffset), by producer id and first
    # offset only. A producer id runs one transaction at a time in a partition and each ends
    # with a control batch of that id, so an entry of ours that starts at or before our batch
    # is our transaction unless a marker of ours lies between its start and our batch: then it
    # is an earlier transaction (an aborted attempt, a transaction-version-2 epoch before),
    # whose marker, being at or after F, is in the contiguous data returned from F. With F at
    # our batch no such marker can be in range: the rule before ranged fetches.
    start = offset if probe.fetch_offset is None else probe.fetch_offset
    for pid, first in probe.aborted_transactions:
        if pid != producer_id or first > batch.base_offset:
            continue
        ended = any(m_pid == pid and max(first, start) <= m_base < batch.base_offset
                    for m_pid, m_base in probe.markers)
        if not ended:
            return LogCheckResult(LogOutcome.ABORTED, None, f"aborted from offset {first}", probe)
    return LogCheckResult(LogOutcome.COMMITTED, None, "", probe)


@dataclass(frozen=True)
class RangeAnswer:
    """What a read_committed Fetch of one partition from `fetch_offset` returned: every batch
    header, in log order (the last batch may be cut short; its header is whole)."""

    topic: str
    partition: int
    fetch_offset: int
    error: str | None
    last_stable_offset: int
    high_watermark: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...]
    batches: tuple[BatchHeader, ...]


def probe_at(answer: RangeAnswer, offset: int) -> FetchProbe | None:
    """The probe this answer is for a span at `offset` (>= the fetch offset), as a fetch at the
    span itself would have returned its first batch; None when the span lies past the returned
    batches below the last stable offset: only a fetch from further on can answer it."""
    return _Reach(answer).probe(offset)


class _Reach:
    """An answer's batches indexed for many spans: the batch reaching an offset by bisection,
    the markers below it as a prefix (a check of thousands of spans stays n log n)."""

    def __init__(self, answer: RangeAnswer) -> None:
        self.answer = answer
        self.lasts = [b.last_offset for b in answer.batches]
        self.markers: list[tuple[int, int]] = []
        self.markers_before: list[int] = []  # per batch: how many control batches precede it
        for b in answer.batches:
            self.markers_before.append(len(self.markers))
            if b.control:
                self.markers.append((b.producer_id, b.base_offset))

    def probe(self, offset: int) -> FetchProbe | None:
        a = self.answer
        i = bisect.bisect_left(self.lasts, offset)
        batch = a.batches[i] if i < len(a.batches) else None
        if (batch is None and a.error is None and offset != a.fetch_offset
                and offset < a.last_stable_offset):
            return None
        markers = () if batch is None else tuple(self.markers[:self.markers_before[i]])
        return FetchProbe(a.topic, a.partition, offset, a.error, a.last_stable_offset,
                          a.high_watermark, a.log_start_offset, a.aborted_transactions, batch,
                          a.fetch_offset, markers)


def decide_spans(answer: RangeAnswer, spans: Sequence[tuple[int, int, int]]
                 ) -> list[LogCheckResult | None]:
    """`decide` for each span (offset, producer id, epoch) at or after the fetch offset, from one
    answer; None for a span the answer does not reach (fetch again from its offset)."""
    out: list[LogCheckResult | None] = []
    reach = _Reach(answer)
    for offset, producer_id, epoch in spans:
        if offset < answer.fetch_offset:
            raise ValueError(f"span at {offset} is below the fetch offset {answer.fetch_offset}")
        probe = reach.probe(offset)
        out.append(None if probe is None else decide(probe, producer_id, epoch))
    return out
