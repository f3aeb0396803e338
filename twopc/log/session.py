"""One driver call's view of the checkpoint log, and its only way to append (the log fence).

A session reads the log once, then appends at exactly the next number after the last record it
read; a lost race means another driver writes this log, and the call stops (LogOwnershipLost)
before it sends anything more. The binding (which query or job owns the log) lives in the log's
index: records are purged, the binding never is. A `LogView` is the same read for a caller that
never appends (`twopc status`, `twopc recover`'s report): one decoding of the records for both.

Design: docs/design.md section 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpoint import KeyExists, Log, RecordBeyondEnd, RecordExists, RecordPurged
from checkpoint.memo import Memo
from twopc.errors import InconsistentLog, LogOwnershipLost, PrefixChanged, QueryMismatch
from twopc.protocol.log_records import (
    LogRecord,
    RecordFormatError,
    binding_body,
    binding_from_body,
    from_body,
    to_body,
)
from twopc.protocol.owner import Owner
from twopc.protocol.state import LogState, fold

BINDING_KEY = "binding"

# Every driver call reads the log afresh (a GET per record) and folds it; turning the bodies into
# records (an intent of 64 handles holds 64 handles of 8 spans) was the largest part of a 64-handle
# commit's own CPU. A record never changes once created at its number, so a process keeps what it
# decoded, keyed by log and number, and reuses it only for a body equal to the one read now (a log
# deleted and started again at the same URL has other bodies). Bounded; only a speed-up.
# 256 records of all logs this process reads; a log keeps ~3 per retained batch.
_decoded: Memo[tuple[str, int], tuple[dict[str, Any], LogRecord]] = Memo(256)


def decode_record(url: str, seq: int, body: dict[str, Any]) -> LogRecord:
    """`from_body(body)`, reusing this process's earlier decoding of the same record."""
    key = (url, seq)
    hit = _decoded.get(key)
    if hit is not None and hit[0] is body:  # the log handed back the body it unpacked before
        return hit[1]
    if hit is not None and hit[0] == body:
        # Equal, not the same object (this process appended the record: it kept the body it
        # wrote): keep the log's, so that the next read of it is an identity check too.
        _decoded.put(key, (body, hit[1]))
        return hit[1]
    record = from_body(body)
    _decoded.put(key, (body, record))
    return record


def read_records(log: Log) -> tuple[int, list[tuple[int, LogRecord]]]:
    """The log's low-water mark and its records from there, decoded; InconsistentLog names a
    record that is not one of twopc's (never skipped)."""
    start = log.low_water_mark()
    records: list[tuple[int, LogRecord]] = []
    for rec in log.records():
        try:
            records.append((rec.seq, decode_record(log.url, rec.seq, rec.body)))
        except RecordFormatError as exc:
            raise InconsistentLog(log.url, rec.seq, str(exc)) from exc
    return start, records


@dataclass(frozen=True)
class LogView:
    """The whole log as it is now, folded, for a reader that never appends."""

    log: Log
    owner: Owner
    records: list[tuple[int, LogRecord]]
    state: LogState
    low_water_mark: int


def read_view(log: Log) -> LogView | None:
    """The log's view; None if it holds no binding (no twopc log, or one never bound yet)."""
    binding = read_binding(log)
    if binding is None:
        return None
    mark, records = read_records(log)
    return LogView(log, binding, records, fold(records, log.url, mark), mark)


def read_binding(log: Log) -> Owner | None:
    """The owner the log is bound to (None: never bound)."""
    body = log.index.get(BINDING_KEY)
    if body is None:
        return None
    try:
        return binding_from_body(body)
    except RecordFormatError as exc:
        raise InconsistentLog(log.url, -1, f"unreadable binding: {exc}") from exc


def check_binding(log: Log, wanted: Owner, *, create: bool) -> bool:
    """Raise QueryMismatch if the log is bound to something else (PrefixChanged: to the same
    query or job family under another prefix); bind it if `create`.
    Returns whether the log is bound (to `wanted`)."""
    found = read_binding(log)
    if found is None and create:
        try:
            log.index.create(BINDING_KEY, binding_body(wanted))
            return True
        except KeyExists:
            found = read_binding(log)  # another driver bound it meanwhile: compare with theirs
    if found is None:
        return False
    if found.renamed_to(wanted):
        raise PrefixChanged(log.url, found.describe(), wanted.describe(), found.prefix,
                            wanted.prefix)
    if found != wanted:
        raise QueryMismatch(log.url, found.describe(), wanted.describe())
    return True


class Session:
    """The records of one call, folded; `append` is the only write."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self._start, self._records = read_records(log)
        self.state: LogState = fold(self._records, log.url, self._start)
        self.appended = 0

    def confirm_owner(self) -> None:
        """LogOwnershipLost if another driver appended after this session's last record. For a
        request whose epoch no record names (an offsets-only transaction's InitProducerId): made
        after it, this check and the other driver's InitProducerId, sent after its own append,
        leave no order in which both go on."""
        seq = self.state.last_seq + 1
        try:
            self.log.read(seq)
        except RecordBeyondEnd:
            return
        except RecordPurged as exc:  # another driver appended and purged past it
            raise LogOwnershipLost(self.log.url, seq) from exc
        raise LogOwnershipLost(self.log.url, seq)

    def append(self, record: LogRecord) -> int:
        """Append at the next number; LogOwnershipLost if another driver took it."""
        seq = self.state.last_seq + 1
        body = to_body(record)
        try:
            self.log.append(seq, body)
        except RecordExists as exc:
            raise LogOwnershipLost(self.log.url, seq) from exc
        # The record at `seq` is this body now: the next call of this process that reads it back
        # (an intent of 64 handles, on every commit) finds it decoded.
        _decoded.put((self.log.url, seq), (body, record))
        self._records.append((seq, record))
        self.state = fold([(seq, record)], self.log.url, self._start, after=self.state)
        self.appended += 1
        return seq
