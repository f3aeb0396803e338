"""The append-only log and its string-keyed index.

Layout under the log's URL (see docs/checkpoint.md):
``records/<seq, 20 digits>`` one file per record, created once, never rewritten;
``index/k-<quoted key>`` index entries, created once, never purged implicitly;
``_pointer`` a hint naming a recent record (overwritten; readers probe forward from it);
``_low_water_mark`` the durable mark below which records may be gone (only moves forward).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from checkpoint import framing
from checkpoint.crash import crash_point
from checkpoint.errors import (
    AppendGap,
    CheckpointError,
    ConditionalCreateUnsupported,
    InvalidPurge,
    InvalidRecord,
    KeyExists,
    LogNotFound,
    RecordBeyondEnd,
    RecordCorrupt,
    RecordExists,
    RecordMissing,
    RecordPurged,
)
from checkpoint.memo import Memo
from checkpoint.record import Record
from checkpoint.redact import redact_url
from checkpoint.store import Store, open_store, probe_conditional_create

_log = logging.getLogger(__name__)

# Every driver call reads every kept record afresh (a GET each, docs/design.md section 6), and
# unpacking them (an intent of 64 handles is tens of kilobytes) was most of a read's CPU. A record
# file is created once and never rewritten, so a process keeps what it unpacked, keyed by the
# file's location, and reuses it only for the very bytes it unpacked then (a log removed and
# started again at the same URL has other bytes: each record carries a nonce). A record read twice
# therefore shares its body with the earlier read: bodies are read-only. Bounded; a speed-up only.
_unpacked: Memo[str, tuple[bytes, Record]] = Memo(512)

POINTER = "_pointer"
MARK = "_low_water_mark"
_MAX_KEY_BYTES = 200


def record_path(seq: int) -> str:
    """The key of record ``seq`` relative to the log's root."""
    return f"records/{seq:020d}"


def index_path(key: str) -> str:
    """The key of index entry ``key``; InvalidRecord for an empty or too long key."""
    if not isinstance(key, str) or not key:
        raise InvalidRecord(f"index key must be a non-empty string, got {key!r}")
    encoded = quote(key, safe="")
    if len(encoded) > _MAX_KEY_BYTES:
        raise InvalidRecord(
            f"index key {key[:40]!r}... is {len(encoded)} bytes once quoted; the limit is "
            f"{_MAX_KEY_BYTES}: use a shorter key (a hash of it, for example)"
        )
    return f"index/k-{encoded}"


def _check_body(body: object) -> dict[str, Any]:
    if not isinstance(body, dict) or not all(isinstance(k, str) for k in body):
        raise InvalidRecord(f"a body must be a dict with str keys, got {type(body).__name__}")
    return body


class Index:
    """String-keyed records stored beside the log; created once, never purged implicitly.

    Meant for facts that must outlive purges, such as the ids of batch jobs already written.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def create(self, key: str, body: dict[str, Any]) -> None:
        """Create ``key`` conditionally; raise :class:`KeyExists` if it is already present."""
        path = index_path(key)
        data = framing.encode(
            {"kind": "index", "key": key, "nonce": uuid.uuid4().hex, "body": _check_body(body)}
        )
        if self._store.create(path, data):
            return
        # A retried request can find its own first attempt: identical bytes (nonce) mean ours.
        if self._store.get(path) != data:
            raise KeyExists(self._where(path), key)

    def get(self, key: str) -> dict[str, Any] | None:
        """The body stored under ``key``, or None if there is none."""
        path = index_path(key)
        data = self._store.get(path)
        if data is None:
            return None
        payload = framing.decode(self._where(path), data)
        if payload.get("kind") != "index" or payload.get("key") != key:
            raise RecordCorrupt(self._where(path), f"not the index entry for key {key!r}")
        return _payload_body(self._where(path), payload)

    def _where(self, path: str) -> str:
        return f"{self._store.url.rstrip('/')}/{path}"


def _payload_body(where: str, payload: dict[str, Any]) -> dict[str, Any]:
    body = payload.get("body")
    if not isinstance(body, dict):
        raise RecordCorrupt(where, "payload has no body map")
    return body


class Log:
    """An append-only log of msgpack records with increasing sequence numbers (first is 0).

    Safe for several processes at once: every append is a conditional create of exactly one
    number, so two writers never both win a number. Purge is meant for the single writer that
    holds the fence (it has just appended); see docs/checkpoint.md.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._index = Index(store)
        # The records this object's last purge deleted, [from, to): the next purge only makes
        # those deletes durable. Any other range below the mark (a crash, another process's
        # purge) is deleted again first: a delete per record, a request each on object stores.
        self._deleted: tuple[int, int] | None = None

    @property
    def url(self) -> str:
        """The URL the log was opened at."""
        return self._store.url

    @property
    def index(self) -> Index:
        """The string-keyed index beside this log."""
        return self._index

    # -- reading --------------------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{self._store.url.rstrip('/')}/{path}"

    def _get(self, seq: int) -> Record | None:
        path = record_path(seq)
        data = self._store.get(path)
        if data is None:
            return None
        where = self._where(path)
        hit = _unpacked.get(where)
        if hit is not None and hit[0] == data:
            return hit[1]
        payload = framing.decode(where, data)
        if payload.get("kind") != "record" or not _is_seq(payload.get("seq")) \
                or payload.get("seq") != seq:
            raise RecordCorrupt(
                where, f"holds {payload.get('kind')} {payload.get('seq')}, not record {seq}"
            )
        record = Record(seq, _payload_body(where, payload))
        _unpacked.put(where, (data, record))
        return record

    def _pointer(self) -> int | None:
        data = self._store.get(POINTER)
        if data is None:
            return None
        try:
            payload = framing.decode(self._where(POINTER), data)
        except CheckpointError as e:
            # Only a hint: readers find the end from the low-water mark without it.
            _log.warning("ignoring unreadable pointer hint: %s", e)
            return None
        seq = payload.get("seq")
        if not isinstance(seq, int) or not _is_seq(seq):
            _log.warning("ignoring the pointer hint %s: it names %r, not a record number",
                         self._where(POINTER), seq)
            return None
        return seq

    def low_water_mark(self) -> int:
        """Records below this number may have been purged; durable, only moves forward."""
        return self._mark()[0]

    def _mark(self) -> tuple[int, int]:
        """(mark, sweep_from): records in [sweep_from, mark) may still await deletion, or their
        deletes being made durable (the next purge does that)."""
        data = self._store.get(MARK)
        if data is None:
            return 0, 0
        payload = framing.decode(self._where(MARK), data)
        below, sweep = payload.get("below"), payload.get("sweep_from")
        if payload.get("kind") != "mark" or not _is_seq(below) or not _is_seq(sweep):
            raise RecordCorrupt(self._where(MARK), f"not a low-water mark: below={below!r:.40}, "
                                f"sweep_from={sweep!r:.40} (each a record number 0 to {_MAX_SEQ})")
        assert isinstance(below, int) and isinstance(sweep, int)
        if sweep > below:
            raise RecordCorrupt(self._where(MARK), f"the low-water mark {below} is below the "
                                f"record its purge sweeps from ({sweep}), which no purge writes")
        return below, sweep

    def _end_from(self, seq: int) -> Record | None:
        """Probe forward from existing record ``seq``; the last record before the first miss."""
        current = self._get(seq)
        if current is None:
            return None
        while True:
            following = self._get(current.seq + 1)
            if following is None:
                following = self._confirm_end(current.seq + 1)
                if following is None:
                    return current
            current = following

    def _confirm_end(self, missing: int) -> Record | None:
        """A miss at ``missing`` is the end unless a later record or the pointer says otherwise.

        Returns the record if it appeared meanwhile (a concurrent append), None at the end.
        """
        hint = self._pointer()
        later = self._store.get(record_path(missing + 1)) is not None
        if (hint is not None and hint >= missing) or later:
            # A writer may have appended both since our miss: read the missing one again.
            again = self._get(missing)
            if again is not None:
                return again
            end = max(hint or 0, missing + 1 if later else 0)
            mark = self.low_water_mark()
            if missing < mark:
                raise RecordPurged(self._where(record_path(missing)), missing, mark)
            raise RecordMissing(self._where(record_path(missing)), missing, mark, end)
        return None

    def last(self) -> Record | None:
        """The latest record, or None for an empty log.

        Costs a few GETs whatever the log's length: the pointer hint, the record it names, and
        the probes forward to the first missing number (plus one look-ahead that turns a lost
        record into RecordMissing instead of a false end).
        """
        hint = self._pointer()
        if hint is not None:
            found = self._end_from(hint)
            if found is not None:
                return found
        mark, _ = self._mark()
        if hint is not None and hint >= mark:
            raise RecordMissing(self._where(record_path(hint)), hint, mark, hint)
        found = self._end_from(mark)
        if found is not None:
            return found
        if mark > 0:
            # Purge never removes the latest record, so the record at the mark must exist.
            raise RecordMissing(self._where(record_path(mark)), mark, mark, mark)
        if self._confirm_end(0) is not None:
            return self.last()
        return None

    def read(self, seq: int) -> Record:
        """Record ``seq``.

        Raises RecordPurged below the low-water mark, RecordBeyondEnd after the latest record,
        RecordMissing for a hole in between (corruption), RecordCorrupt for a damaged file.
        """
        _check_seq(seq)
        found = self._get(seq)
        if found is not None:
            return found
        mark, _ = self._mark()
        if seq < mark:
            raise RecordPurged(self._where(record_path(seq)), seq, mark)
        last = self.last()
        if last is None or seq > last.seq:
            raise RecordBeyondEnd(
                self._where(record_path(seq)), seq, None if last is None else last.seq
            )
        again = self._get(seq)
        if again is not None:
            return again
        raise RecordMissing(self._where(record_path(seq)), seq, mark, last.seq)

    def since(self, seq: int) -> Iterator[Record]:
        """Records with number > ``seq``, in order, up to the end.

        Raises RecordPurged if record ``seq + 1`` is below the low-water mark (use
        :meth:`records` to read everything that is kept).
        """
        if not isinstance(seq, int) or seq < -1:
            raise InvalidRecord(f"since() takes a record number >= -1, got {seq!r}")
        mark, _ = self._mark()
        if seq + 1 < mark:
            raise RecordPurged(self._where(record_path(seq + 1)), seq + 1, mark)
        return self._iterate(seq + 1, mark)

    def records(self) -> Iterator[Record]:
        """Every record kept, from the low-water mark to the end, in order."""
        mark, _ = self._mark()
        return self._iterate(mark, mark)

    def _iterate(self, start: int, mark: int) -> Iterator[Record]:
        seq = start
        while True:
            found = self._get(seq)
            if found is None:
                now_mark, _ = self._mark()
                if seq < now_mark:
                    raise RecordPurged(self._where(record_path(seq)), seq, now_mark)
                if seq == now_mark and seq > 0:
                    raise RecordMissing(self._where(record_path(seq)), seq, now_mark, seq)
                found = self._confirm_end(seq)
                if found is None:
                    return
            yield found
            seq += 1

    # -- writing --------------------------------------------------------------------------

    def append(self, expected_seq: int, body: dict[str, Any]) -> Record:
        """Create record ``expected_seq`` (the caller's ``last().seq + 1``, 0 at first).

        The create is conditional and durable before this returns. Raises RecordExists if
        another writer already took that number (the caller lost the race: re-read and decide
        again; this never retries at a higher number), AppendGap if the previous record does not
        exist, InvalidRecord for a body that is not a dict of msgpack-able values.
        """
        _check_seq(expected_seq)
        path = record_path(expected_seq)
        data = framing.encode(
            {
                "kind": "record",
                "seq": expected_seq,
                "nonce": uuid.uuid4().hex,
                "body": _check_body(body),
            }
        )
        mark, _ = self._mark()
        if expected_seq < mark:
            # It existed and was purged: the caller is behind, exactly as if it lost the race.
            raise RecordExists(self._where(path), expected_seq)
        if expected_seq > mark and self._store.get(record_path(expected_seq - 1)) is None:
            if expected_seq <= self.low_water_mark():
                raise RecordExists(self._where(path), expected_seq)  # purged meanwhile
            raise AppendGap(self._where(path), expected_seq)
        crash_point("append.before_create")
        if not self._store.create(path, data) and self._store.get(path) != data:
            raise RecordExists(self._where(path), expected_seq)
        crash_point("append.after_create")
        self._write_pointer(expected_seq)
        return Record(expected_seq, body)

    def _write_pointer(self, seq: int) -> None:
        try:
            self._store.put(POINTER, framing.encode({"kind": "pointer", "seq": seq}), durable=False)
        except CheckpointError as e:
            # The record is durable; a stale hint costs readers a few probes, nothing else.
            _log.warning("could not update the pointer hint to %d: %s", seq, e)

    def purge(self, below: int) -> None:
        """Move the low-water mark forward to ``below``, then delete the records under it.

        A ``below`` at or under the current mark is a no-op (the mark never moves back).
        Raises InvalidPurge if ``below`` is beyond the latest record: the latest record always
        stays, since an empty-looking log would let the next writer start again at 0.
        """
        _check_seq(below)
        mark, sweep_from = self._mark()
        if below <= mark:
            return
        last = self.last()
        if last is None or below > last.seq:
            raise InvalidPurge(self._store.url, below, None if last is None else last.seq)
        if sweep_from < mark:
            # The deletes of the purge before (or what a crash left of them), made durable here
            # rather than there: the mark is written once per purge, not twice (three fsyncs of
            # a local log instead of five, on every commit's path).
            if self._deleted != (sweep_from, mark):
                # The mark read may not be durable yet (its writer killed before the directory's
                # fsync): made so before its records go, or a crash could bring back an older
                # mark with records above it gone (a reviewer's model showed it).
                self._store.put(MARK, _mark_bytes(mark, sweep_from), durable=True)
                for seq in range(sweep_from, mark):
                    self._store.delete(record_path(seq))
            self._store.sync()
        self._deleted = None
        # The mark is durable before any record goes, so a crash never leaves a hole above it;
        # the records it leaves below it, this purge's, are deleted now and made durable by the
        # next one (a crash may bring some back: the next purge deletes them again).
        self._store.put(MARK, _mark_bytes(below, mark), durable=True)
        crash_point("purge.after_mark")
        for seq in range(mark, below):
            self._store.delete(record_path(seq))
            if seq == (mark + below) // 2:
                crash_point("purge.mid_delete")
        self._deleted = (mark, below)


def _mark_bytes(below: int, sweep_from: int) -> bytes:
    return framing.encode({"kind": "mark", "below": below, "sweep_from": sweep_from})


_MAX_SEQ = 2**63 - 1


def _is_seq(value: object) -> bool:
    """A record number as stored: an int (not a bool, not a float) from 0 to 2**63 - 1."""
    return type(value) is int and 0 <= value <= _MAX_SEQ


def _check_seq(seq: object) -> None:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise InvalidRecord(f"a record number is an int >= 0, got {seq!r}")


def open_log(
    url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    allow_unconditional_create: bool = False,
    read_only: bool = False,
) -> Log:
    """Open (or start) the log at fsspec ``url`` with fsspec ``storage_options``.

    Checks for real that the backend refuses a second create of a probe key; if it does not,
    raises ConditionalCreateUnsupported (naming the risk) unless ``allow_unconditional_create``
    accepts that two writers might both win a number. ``memory://`` lives inside one process:
    for single-process unit tests only. Storage failures raise StorageUnavailable.

    ``read_only``: for a caller that never writes (an inspection tool): no probe (it writes), any
    backend, and a local directory that is not there is LogNotFound instead of being created.
    """
    if read_only:
        local = url[len("file://"):] if url.startswith("file://") else None if "://" in url else url
        if local is not None and not os.path.isdir(local):
            raise LogNotFound(url)
        return Log(open_store(url, storage_options, True))
    store = open_store(url, storage_options, allow_unconditional_create)
    problem = probe_conditional_create(store)
    if problem is not None:
        if not allow_unconditional_create:
            raise ConditionalCreateUnsupported(url, problem)
        _log.warning("log %s: %s; continuing, the caller accepted the risk", redact_url(url),
                     problem)
    return Log(store)
