"""An ended transaction's records read back from one partition's log, for copy-forward
(docs/design.md section 4). The scan is pure (`Scan`): the client feeds it what each
read_uncommitted Fetch returned, decoded by record_decode.py, until it is done.

From the transaction's first offset in the partition, the scan keeps the records of data batches
of the recorded producer id and epoch (transactional, not control) and passes over other producers'
batches, until the first control batch of that producer id with that epoch or a later one: its
marker ends the transaction (a coordinator that aborts on timeout bumps the epoch, so the abort
marker may carry the next one). Whatever does not fit is a `ReadProblem` with its reason, never a
guess: the first offset below the log start (retention, deleted records), a re-created topic, no
batch of ours at the first offset (compaction, another producer), a batch of our producer id with
another epoch before the marker, more records than the handle counts, the log's end reached
without a marker.

Design: docs/design.md section 4.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from twopc.control.record_decode import CONTROL_ABORT, CONTROL_COMMIT, Batch, Record


class ReadProblem(enum.Enum):
    BELOW_LOG_START = "the records are gone: the first offset is below the log start (retention " \
        "or deleted records)"
    TOPIC_CHANGED = "the records are gone: the topic was deleted or re-created (its id changed)"
    NO_BATCH = "no batch of the transaction at its first offset (compacted, or another producer)"
    OTHER_EPOCH = "a batch of the producer id with another epoch before the transaction's end"
    NOT_TRANSACTIONAL = "a batch of the producer id that is not transactional"
    TOO_MANY = "more records than the handle counts before the transaction's end"
    NO_MARKER = "the log ends before the transaction's marker (not ended yet?)"
    FETCH_ERROR = "the fetch failed"


class Ending(enum.Enum):
    ABORTED = "aborted"
    COMMITTED = "committed"


@dataclass(frozen=True)
class SpanRecords:
    """What the log holds of one transaction in one partition: its records up to its marker, and
    how it ended; or why that cannot be read (`problem`, with `detail`)."""

    topic: str
    partition: int
    first_offset: int
    records: tuple[Record, ...] = ()
    ending: Ending | None = None
    problem: ReadProblem | None = None
    detail: str = ""
    fetches: int = 0

    def describe(self) -> str:
        where = f"{self.topic}[{self.partition}]@{self.first_offset}"
        if self.problem is None:
            return f"{where}: {len(self.records)} records, {self.ending and self.ending.value}"
        return f"{where}: {self.problem.value}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Scan:
    """The scan of one partition (module doc). Feed `batches` of each fetch in order; `done`
    once the marker is found or a problem stops it; `next_offset` is where to fetch next."""

    topic: str
    partition: int
    first_offset: int
    producer_id: int
    epoch: int
    expected: int  # the handle's record count here: one more is a problem, and memory's bound
    next_offset: int = -1
    records: list[Record] = field(default_factory=list)
    ending: Ending | None = None
    problem: ReadProblem | None = None
    detail: str = ""
    fetches: int = 0

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.first_offset

    @property
    def done(self) -> bool:
        return self.ending is not None or self.problem is not None

    def stop(self, problem: ReadProblem, detail: str) -> None:
        self.problem, self.detail = problem, detail

    def feed(self, batches: list[Batch], log_start: int, high_watermark: int) -> None:
        self.fetches += 1
        if log_start > self.first_offset:
            self.stop(ReadProblem.BELOW_LOG_START,
                      f"offset {self.first_offset} < log start {log_start}")
            return
        for batch in batches:
            if batch.header.last_offset < self.next_offset:
                continue  # a batch the fetch began before the offset asked for
            self._one(batch)
            if self.done:
                return
            self.next_offset = batch.next_offset
        if not self.done and self.next_offset >= high_watermark:
            self.stop(ReadProblem.NO_MARKER, f"read to the high watermark {high_watermark} with "
                      f"{len(self.records)} records and no marker of producer id "
                      f"{self.producer_id}")

    def _one(self, batch: Batch) -> None:
        h = batch.header
        started = bool(self.records)
        if not started and h.base_offset > self.first_offset:
            self.stop(ReadProblem.NO_BATCH, f"the first batch at or after offset "
                      f"{self.first_offset} starts at {h.base_offset} (producer id "
                      f"{h.producer_id})")
            return
        if h.producer_id != self.producer_id:
            if not started:
                self.stop(ReadProblem.NO_BATCH, f"the batch at offset {self.first_offset} is of "
                          f"producer id {h.producer_id} epoch {h.producer_epoch}")
            return
        if batch.control_type is not None:
            if not started or h.producer_epoch < self.epoch:
                self.stop(ReadProblem.NO_BATCH, f"a marker of producer id {h.producer_id} epoch "
                          f"{h.producer_epoch} at offset {h.base_offset} before the records")
            elif batch.control_type == CONTROL_ABORT:
                self.ending = Ending.ABORTED
            elif batch.control_type == CONTROL_COMMIT:
                self.ending = Ending.COMMITTED
            # (another control type is not a transaction marker: read on)
            return
        if h.producer_epoch != self.epoch:
            self.stop(ReadProblem.OTHER_EPOCH, f"epoch {h.producer_epoch} at offset "
                      f"{h.base_offset}, the handle's is {self.epoch}")
            return
        if not h.transactional:
            self.stop(ReadProblem.NOT_TRANSACTIONAL, f"attributes {h.attributes:#x} at offset "
                      f"{h.base_offset}")
            return
        if not started and h.base_offset != self.first_offset:
            self.stop(ReadProblem.NO_BATCH, f"the producer's batch holding offset "
                      f"{self.first_offset} starts at {h.base_offset}")
            return
        self.records.extend(batch.records)
        if len(self.records) > self.expected:
            self.stop(ReadProblem.TOO_MANY, f"{len(self.records)} records by offset "
                      f"{h.last_offset}, the handle counts {self.expected}")

    def result(self) -> SpanRecords:
        return SpanRecords(self.topic, self.partition, self.first_offset,
                           tuple(self.records) if self.problem is None else (), self.ending,
                           self.problem, self.detail, self.fetches)
