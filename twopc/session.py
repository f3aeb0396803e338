"""One driver call's view of the checkpoint log, and its only way to append (the log fence).

A session reads the log once, then appends at exactly the next number after the last record it
read; a lost race means another driver writes this log, and the call stops (LogOwnershipLost)
before it sends anything more. The binding (which query or job owns the log) lives in the log's
index: records are purged, the binding never is.
"""

from __future__ import annotations

from checkpoint import KeyExists, Log, RecordExists
from twopc.decisions import LogState, fold
from twopc.errors import InconsistentLog, LogOwnershipLost, QueryMismatch
from twopc.records import (
    Binding,
    LogRecord,
    RecordFormatError,
    binding_body,
    binding_from_body,
    from_body,
    to_body,
)

BINDING_KEY = "binding"


def read_binding(log: Log) -> Binding | None:
    body = log.index.get(BINDING_KEY)
    if body is None:
        return None
    try:
        return binding_from_body(body)
    except RecordFormatError as exc:
        raise InconsistentLog(log.url, -1, f"unreadable binding: {exc}") from exc


def check_binding(log: Log, wanted: Binding, *, create: bool) -> bool:
    """Raise QueryMismatch if the log is bound to something else; bind it if `create`.
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
    if found != wanted:
        raise QueryMismatch(log.url, found.describe(), wanted.describe())
    return True


class Session:
    """The records of one call, folded; `append` is the only write."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self._records: list[tuple[int, LogRecord]] = []
        self._start = log.low_water_mark()
        for rec in log.records():
            try:
                self._records.append((rec.seq, from_body(rec.body)))
            except RecordFormatError as exc:
                raise InconsistentLog(log.url, rec.seq, str(exc)) from exc
        self.state: LogState = fold(self._records, log.url, self._start)
        self.appended = 0

    def append(self, record: LogRecord) -> int:
        """Append at the next number; LogOwnershipLost if another driver took it."""
        seq = self.state.last_seq + 1
        try:
            self.log.append(seq, to_body(record))
        except RecordExists as exc:
            raise LogOwnershipLost(self.log.url, seq) from exc
        self._records.append((seq, record))
        self.state = fold(self._records, self.log.url, self._start)
        self.appended += 1
        return seq
